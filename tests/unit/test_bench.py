"""`inferd bench`: dataset shapes, report statistics, Poisson arrivals, and a
whole run against the app on a tiny model."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics

import httpx
import numpy as np
import pytest

from inferd.bench.client import RequestResult
from inferd.bench.datasets import Session, multi_turn_sessions, random_sessions, shared_prefix_sessions
from inferd.bench.report import CacheCounters, distribution, summarize
from inferd.bench.runner import arrival_gaps, run_sessions
from inferd.bench.tokenizer import ServerTextMaker, WordTextMaker, text_maker_for
from inferd.bench.words import WORDS
from inferd.chat.template import ChatTemplate
from inferd.cli import main
from inferd.models.loader import load_model
from router_fakes import ServerThread
from served import served, small_config

WORD_MAKER = WordTextMaker()


def word_count(text: str) -> int:
    return len(text.split())


def test_random_prompts_are_deterministic_and_sized():
    a = random_sessions(WORD_MAKER, 7, num_prompts=5, input_len=12, output_len=3)
    assert a == random_sessions(WORD_MAKER, 7, num_prompts=5, input_len=12, output_len=3)
    assert a != random_sessions(WORD_MAKER, 8, num_prompts=5, input_len=12, output_len=3)
    assert len(a) == 5
    for s in a:
        assert len(s.turns) == 1 and s.output_len == 3 and s.prefix == ""
        assert word_count(s.prompt(0, [])) == 12
        assert all(w in WORDS for w in s.turns[0].split())


def test_shared_prefix_groups_share_exactly_the_system_prompt():
    sessions = shared_prefix_sessions(WORD_MAKER, 3, groups=3, prompts_per_group=4,
                                      system_prompt_len=20, question_len=6, output_len=5)
    assert sessions == shared_prefix_sessions(WORD_MAKER, 3, groups=3, prompts_per_group=4,
                                              system_prompt_len=20, question_len=6, output_len=5)
    assert len(sessions) == 12
    by_prefix: dict[str, list[Session]] = {}
    for s in sessions:
        by_prefix.setdefault(s.prefix, []).append(s)
    assert len(by_prefix) == 3
    for prefix, members in by_prefix.items():
        assert len(members) == 4
        assert prefix.endswith("\n\n") and word_count(prefix) == 20
        for s in members:
            prompt = s.prompt(0, [])
            assert prompt == prefix + s.turns[0]
            assert word_count(s.turns[0]) == 6
    # Prompts of different groups share no system prompt: their prefixes differ in text.
    prefixes = list(by_prefix)
    assert all(not a.startswith(b) for a in prefixes for b in prefixes if a is not b)


def test_multi_turn_replays_history_in_order():
    sessions = multi_turn_sessions(WORD_MAKER, 1, conversations=2, turns=3, input_len=4, output_len=2)
    assert sessions == multi_turn_sessions(WORD_MAKER, 1, conversations=2, turns=3, input_len=4, output_len=2)
    assert len(sessions) == 2 and all(len(s.turns) == 3 for s in sessions)
    assert all(word_count(t) == 4 for s in sessions for t in s.turns)
    s = sessions[0]
    q0, q1, q2 = s.turns
    assert s.prompt(0, []) == f"User: {q0}\nAssistant:"
    assert s.prompt(2, [" a0", " a1"]) == f"User: {q0}\nAssistant: a0\nUser: {q1}\nAssistant: a1\nUser: {q2}\nAssistant:"


def test_distribution_matches_numpy():
    samples = [0.012, 0.5, 0.031, 0.2, 0.2, 0.0071, 1.9, 0.044, 0.3, 0.09, 0.65]
    ms = np.array(samples) * 1000
    got = distribution(samples)
    assert got["mean_ms"] == pytest.approx(float(np.mean(ms)), rel=1e-12)
    assert got["median_ms"] == pytest.approx(float(np.median(ms)), rel=1e-12)
    assert got["p99_ms"] == pytest.approx(float(np.percentile(ms, 99)), rel=1e-12)
    assert distribution([]) == {"mean_ms": 0.0, "median_ms": 0.0, "p99_ms": 0.0}


def test_summary_counts_throughput_tpot_and_cache_delta():
    results = [
        RequestResult(ok=True, ttft=0.1, itl=[0.02, 0.03], latency=0.5, output_tokens=5),
        RequestResult(ok=True, ttft=0.3, itl=[0.04], latency=1.1, output_tokens=3),
        RequestResult(ok=False, error="HTTP 500: boom"),
    ]
    s = summarize(results, 2.0, CacheCounters(queries=10, hits=2), CacheCounters(queries=30, hits=17))
    assert (s["completed"], s["failed"], s["total_output_tokens"]) == (2, 1, 8)
    assert s["request_throughput"] == 1.0 and s["output_token_throughput"] == 4.0
    assert s["tpot"]["mean_ms"] == pytest.approx(np.mean([(0.5 - 0.1) / 4, (1.1 - 0.3) / 2]) * 1000)
    assert s["itl"]["median_ms"] == pytest.approx(30.0)
    assert s["ttft"]["mean_ms"] == pytest.approx(200.0)
    assert s["e2e_latency"]["p99_ms"] == pytest.approx(float(np.percentile([500.0, 1100.0], 99)))
    assert s["prefix_cache_hit_rate"] == pytest.approx(15 / 20)
    assert s["errors"] == ["HTTP 500: boom"]
    assert summarize(results, 2.0)["prefix_cache_hit_rate"] is None


@pytest.mark.parametrize("rate", [0.5, 4.0, 50.0])
def test_poisson_gaps_have_the_requested_mean(rate):
    n = 20000
    gaps = arrival_gaps(n, rate, seed=11)
    assert gaps == arrival_gaps(n, rate, seed=11)
    # Exponential gaps: the sample mean has standard error (1/rate)/sqrt(n); allow 5 of them.
    assert abs(statistics.fmean(gaps) - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    # The exponential's standard deviation equals its mean.
    assert abs(statistics.pstdev(gaps) - 1 / rate) < 0.05 / rate
    assert min(gaps) >= 0


def test_infinite_rate_sends_everything_at_once():
    assert arrival_gaps(5, math.inf, seed=0) == [0.0] * 5


# --- a real server on a free port ---------------------------------------------


@pytest.fixture(scope="module")
def base_url(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", None, None)
    with served(loaded, small_config(ctx_size=256, parallel=4), template=template) as server:
        thread = ServerThread(server.app).start()
        yield thread.url
        thread.stop()


def test_server_text_is_token_exact(base_url):
    with httpx.Client(base_url=base_url) as http:
        maker = text_maker_for(http)
        assert isinstance(maker, ServerTextMaker)
        rng = random.Random(0)
        for n in (1, 7, 30):
            assert len(maker.encode(maker.make(rng, n))) == n


def test_word_text_when_the_server_cannot_tokenize():
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    with httpx.Client(base_url="http://x", transport=transport) as http:
        assert isinstance(text_maker_for(http), WordTextMaker)


@pytest.mark.parametrize(("dataset", "extra", "requests"), [
    ("random", ["--num-prompts", "4", "--input-len", "16"], 4),
    ("shared-prefix", ["--groups", "2", "--prompts-per-group", "2", "--system-prompt-len", "24", "--question-len", "4"], 4),
    ("multi-turn", ["--num-prompts", "2", "--turns", "2", "--input-len", "8"], 4),
])
def test_a_whole_run_reports_every_field(base_url, capsys, dataset, extra, requests):
    code = main(["bench", "--base-url", base_url, "--dataset", dataset, *extra, "--output-len", "6",
                 "--max-concurrency", "2", "--request-rate", "inf", "--json"])
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert code == 0
    assert set(report) == {"completed", "failed", "total_time_s", "total_output_tokens", "request_throughput",
                           "output_token_throughput", "ttft", "tpot", "itl", "e2e_latency",
                           "prefix_cache_hit_rate", "errors"}
    assert (report["completed"], report["failed"], report["errors"]) == (requests, 0, [])
    assert report["total_output_tokens"] == requests * 6
    for key in ("ttft", "tpot", "itl", "e2e_latency"):
        assert set(report[key]) == {"mean_ms", "median_ms", "p99_ms"}
    assert 0.0 <= report["prefix_cache_hit_rate"] <= 1.0
    assert f"requests {requests}/{requests}  failed 0" in out.err


def test_runner_bounds_concurrency_and_replays_turns_in_order():
    in_flight, peak, prompts = 0, 0, []

    async def send(prompt: str, max_tokens: int) -> RequestResult:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        prompts.append(prompt)
        await asyncio.sleep(0.01)  # a request in flight, for the others to overlap with
        in_flight -= 1
        return RequestResult(ok=True, text=f" ans{len(prompts)}", output_tokens=max_tokens)

    sessions = multi_turn_sessions(WORD_MAKER, 2, conversations=5, turns=2, input_len=3, output_len=4)
    run = asyncio.run(run_sessions(sessions, send, math.inf, 2, seed=0))
    assert peak == 2
    assert len(run.results) == 10 and all(r.output_tokens == 4 for r in run.results)
    for s in sessions:
        first = s.prompt(0, [])
        second = [p for p in prompts if p.startswith(first) and p != first]
        assert len(second) == 1 and prompts.index(first) < prompts.index(second[0])
        answer = second[0][len(first):].split("\n")[0]
        assert second[0] == s.prompt(1, [answer])


def test_a_failed_turn_ends_its_conversation():
    async def send(prompt: str, max_tokens: int) -> RequestResult:
        return RequestResult(ok=False, error="HTTP 503: busy")

    sessions = multi_turn_sessions(WORD_MAKER, 2, conversations=3, turns=4, input_len=3, output_len=4)
    run = asyncio.run(run_sessions(sessions, send, math.inf, None, seed=0))
    assert len(run.results) == 3 and not any(r.ok for r in run.results)
