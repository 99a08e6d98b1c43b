"""The console's server side: /ui's files and their headers (CSP, ETag, no key
needed), and /api/stats, the numbers of /metrics as JSON."""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from inferd.config import RouterOptions
from inferd.console.routes import CSP, load_assets, open_paths
from inferd.console.server_stats import server_stats
from inferd.console.stats import quantile, registry_stats
from inferd.engine.outputs import EngineStats
from inferd.models.loader import load_model
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from served import client, served, small_config

KEY = "console-test-key"
COMPLETION = {"prompt": "The cat sat on the mat", "max_tokens": 5, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def run(app, calls, headers=None):
    async def go():
        async with client(app) as c:
            return [await c.request(method, path, **{"headers": headers, **kwargs}) for method, path, kwargs in calls]

    return asyncio.run(go())


# -- the registry as JSON --------------------------------------------------------

def test_registry_stats_reads_gauges_counters_and_histograms():
    r = CollectorRegistry()
    Gauge("g_plain", "a gauge", registry=r).set(3)
    labelled = Counter("c_labelled", "a counter", ["route"], registry=r)
    labelled.labels("/a").inc(2)
    labelled.labels("/b").inc(0.5)
    Counter("c_plain", "a counter", registry=r).inc(7)
    h = Histogram("h_seconds", "a histogram", buckets=(0.1, 0.2, 0.4), registry=r)
    for v in (0.05, 0.15, 0.15, 0.3):
        h.observe(v)
    stats = registry_stats(r)
    assert stats["gauges"] == {"g_plain": 3}
    assert stats["counters"] == {"c_plain": 7, "c_labelled": [{"labels": {"route": "/a"}, "value": 2},
                                                               {"labels": {"route": "/b"}, "value": 0.5}]}
    hist = stats["histograms"]["h_seconds"]
    assert hist["count"] == 4 and hist["sum"] == pytest.approx(0.65)
    assert hist["buckets"] == [[0.1, 1], [0.2, 3], [0.4, 4], ["+Inf", 4]]
    # p50: rank 2 lies in (0.1, 0.2] holding observations 2-3: 0.1 + 0.1 * (2 - 1) / 2
    assert hist["p50"] == pytest.approx(0.15)
    assert hist["p90"] == pytest.approx(0.2 + 0.2 * (3.6 - 3) / 1)
    assert hist["p99"] == pytest.approx(0.2 + 0.2 * (3.96 - 3) / 1)


def test_quantile_edges():
    assert quantile(0.5, []) is None
    assert quantile(0.5, [(1.0, 0), (float("inf"), 0)]) is None
    # Every observation past the last finite bound: the highest finite bound, not infinity.
    assert quantile(0.99, [(1.0, 0), (2.0, 0), (float("inf"), 5)]) == 2.0
    assert quantile(0.5, [(1.0, 4), (float("inf"), 4)]) == 0.5


# -- /ui ---------------------------------------------------------------------------

class Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.inline, self.urls, self.styles = [], [], [], 0
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts.append(attrs.get("src"))
            self._in_script = True
        if tag == "style" or "style" in attrs or any(a.startswith("on") for a in attrs):
            self.styles += 1
        self.urls += [attrs[a] for a in ("src", "href") if a in attrs]

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline.append(data)


def test_every_file_is_served_with_the_policy_and_the_page_knows_its_role():
    with served(None) as server:  # the console answers while the model still loads
        names = sorted(load_assets("server"))
        answers = run(server.app, [("GET", "/ui", {}), ("GET", "/ui/", {})] +
                      [("GET", f"/ui/{n}", {}) for n in names] + [("GET", "/ui/nope.js", {})])
    redirect, page, *files, missing = answers
    assert redirect.status_code == 308 and redirect.headers["location"] == "ui/"
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    for r in [page, *files]:
        assert r.status_code == 200
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP and "default-src 'none'" in CSP
    assert {n: r.headers["content-type"].split(";")[0] for n, r in zip(names, files)}["app.js"] == "text/javascript"
    assert '<meta name="inferd-role" content="server">' in page.text
    assert missing.status_code == 404
    parsed = Scripts()
    parsed.feed(page.text)
    assert parsed.scripts == ["app.js"] and not parsed.inline and parsed.styles == 0
    assert not [u for u in parsed.urls if re.match(r"^(https?:)?//", u)]  # nothing from another origin
    for name, r in zip(names, files):  # no script or style from anywhere else, in any file
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", r.text), name


def test_an_unchanged_file_is_a_304():
    with served(None) as server:
        (first,) = run(server.app, [("GET", "/ui/app.js", {})])
        (again,) = run(server.app, [("GET", "/ui/app.js", {"headers": {"if-none-match": first.headers["etag"]}})])
    assert again.status_code == 304 and again.content == b""


def test_the_page_needs_no_key_but_the_stats_do():
    with served(None, api_keys=frozenset({KEY})) as server:
        page, script, stats = run(server.app, [("GET", "/ui/", {}), ("GET", "/ui/api.js", {}),
                                               ("GET", "/api/stats", {})])
        (keyed,) = run(server.app, [("GET", "/api/stats", {})], headers={"Authorization": f"Bearer {KEY}"})
    assert page.status_code == 200 and script.status_code == 200
    assert stats.status_code == 401 and isinstance(stats.json()["error"], str)  # /api's envelope
    assert keyed.status_code == 200 and keyed.json()["role"] == "server"
    assert "/api/stats" not in open_paths()


# -- /api/stats --------------------------------------------------------------------

def metric_values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_stats_are_the_numbers_of_metrics(loaded):
    with served(loaded, small_config(metrics=True)) as server:
        done, stats, metrics = run(server.app, [("POST", "/v1/completions", {"json": COMPLETION}),
                                                ("GET", "/api/stats", {}), ("GET", "/metrics", {})])
    assert done.status_code == 200
    body, text = stats.json(), metric_values(metrics.text)
    assert body["role"] == "server" and body["metrics"] is True
    assert body["counters"]["inferd_generation_tokens"] == text["inferd_generation_tokens_total"] == 5
    assert body["counters"]["inferd_prompt_tokens"] == text["inferd_prompt_tokens_total"]
    assert body["gauges"]["inferd_kv_cache_usage_ratio"] == text["inferd_kv_cache_usage_ratio"]
    ttft = body["histograms"]["inferd_time_to_first_token_seconds"]
    assert ttft["count"] == text["inferd_time_to_first_token_seconds_count"] == 1
    assert ttft["p50"] is not None and ttft["p50"] <= ttft["p99"]
    requests = {tuple(sorted(s["labels"].items())): s["value"] for s in body["counters"]["inferd_requests"]}
    assert requests[(("route", "/v1/completions"), ("status", "200"))] == 1
    (model,) = body["models"]
    assert model["name"] == "tiny" and model["generation_tokens_total"] == 5
    assert model["running"] == 0 and model["max_running"] == 2 and 0 <= model["kv_usage"] <= 1


def test_without_metrics_the_engine_numbers_remain(loaded):
    with served(loaded) as server:
        run(server.app, [("POST", "/v1/completions", {"json": COMPLETION})])
        (stats,) = run(server.app, [("GET", "/api/stats", {})])
    body = stats.json()
    assert body["metrics"] is False and body["counters"] == {} and body["histograms"] == {}
    assert body["models"][0]["generation_tokens_total"] == 5


def engine_stats(running: int, generated: int) -> EngineStats:
    return EngineStats(running=running, waiting=1, max_running=4, kv_blocks_total=100, kv_blocks_used=25, block_size=16,
                       prefix_cache_queries=8, prefix_cache_hits=2, prompt_tokens_total=50, tokens_computed_total=60,
                       generation_tokens_total=generated, preemptions=0, steps=9)


def test_stats_name_every_loaded_model_with_its_own_engine_numbers():
    def engine(stats):
        return SimpleNamespace(stats=lambda: stats)

    hosted = [SimpleNamespace(name="other", chat=SimpleNamespace(engine=engine(engine_stats(2, 40))))]
    state = SimpleNamespace(metrics=None, started=0.0, model_name="own", engine=engine(engine_stats(1, 7)),
                            host=SimpleNamespace(loaded=lambda: hosted))
    models = server_stats(state)["models"]
    assert [(m["name"], m["running"], m["generation_tokens_total"]) for m in models] == [("own", 1, 7), ("other", 2, 40)]
    assert models[0]["kv_usage"] == 0.25 and models[0]["prefix_cache_hit_rate"] == 0.25


def test_the_router_serves_the_console_with_its_fleet():
    state = build_router_state(RouterOptions(worker=["http://127.0.0.1:1", "http://127.0.0.1:2"], health_interval=0))
    for record in state.static_records:
        state.fleet.upsert(record, "static")
    app = build_router_app(state, manage=False)
    page, stats = run(app, [("GET", "/ui/", {}), ("GET", "/api/stats", {})])
    assert page.status_code == 200 and '<meta name="inferd-role" content="router">' in page.text
    assert page.headers["content-security-policy"] == CSP
    body = stats.json()
    assert body["role"] == "router" and body["metrics"] is True
    assert [w["id"] for w in body["workers"]] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert body["gauges"]["inferd_router_workers_routable"] == 2
    assert [s["labels"]["worker"] for s in body["gauges"]["inferd_router_in_flight"]] == [
        "http://127.0.0.1:1", "http://127.0.0.1:2"]
