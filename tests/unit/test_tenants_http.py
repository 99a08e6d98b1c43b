"""Tenants over in-process HTTP: key management, 401/403/429 in each
dialect's envelope with OpenAI's rate-limit headers, reservations settled to
usage, concurrency leases, the ledger and /api/usage, request cards with
cancel and interrupt, trace ids, CORS, per-key cache isolation, and exact
counts under 400 concurrent requests from 20 keys."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter, defaultdict

import pytest

from inferd.models.loader import load_model
from polling import async_wait_for
from served import served, small_config

ADMIN = "admin-secret"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
CTX = 512
LONG = 400  # tokens: seconds of generation on the tiny model
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="module")
def server(loaded):
    config = small_config(ctx_size=CTX, parallel=2, metrics=True, cors_origin=["https://app.example"])
    with served(loaded, config, api_keys=frozenset({ADMIN})) as server:
        yield server


def run(coro):
    return asyncio.run(coro)


_names = (f"k{i}" for i in range(10_000))


async def new_key(client, **fields) -> tuple[str, str]:
    name = fields.pop("name", None) or next(_names)
    r = await client.post("/api/keys", json={"name": name, **fields}, headers=AUTH)
    assert r.status_code == 201, r.text
    return name, r.json()["secret"]


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def test_management_round_trip(server):
    async def go():
        async with server.client() as c:
            name, secret = await new_key(c, scopes=["tiny"], limits={"rpm": 7})
            assert secret.startswith("inferd-")
            r = await c.post("/api/keys", json={"name": name}, headers=AUTH)
            assert r.status_code == 409 and "already exists" in r.json()["error"]
            r = await c.post("/api/keys", json={"name": "x", "limits": {"tpm": -3}}, headers=AUTH)
            assert r.status_code == 400 and r.json()["error"].startswith("tpm: must be a whole number")
            listed = (await c.get("/api/keys", headers=AUTH)).json()["data"]
            mine = next(k for k in listed if k["name"] == name)
            assert mine["limits"]["rpm"] == 7 and "secret" not in mine and "secret_hash" not in mine
            assert mine["usage_today"]["requests"] == 0
            assert secret not in json.dumps(listed)
            r = await c.patch(f"/api/keys/{name}", json={"limits": {"rpm": 9}, "disabled": True}, headers=AUTH)
            assert r.json()["limits"]["rpm"] == 9 and r.json()["disabled"]
            r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
            assert r.status_code == 401 and "disabled" in r.json()["error"]["message"]
            await c.patch(f"/api/keys/{name}", json={"disabled": False}, headers=AUTH)
            rotated = (await c.post(f"/api/keys/{name}/rotate", headers=AUTH)).json()["secret"]
            assert (await c.get("/v1/models", headers=bearer(secret))).status_code == 401
            assert (await c.get("/v1/models", headers=bearer(rotated))).status_code == 200
            r = await c.get("/api/keys", headers=bearer(rotated))
            assert r.status_code == 403 and "needs an admin key" in r.json()["error"]
            assert (await c.delete(f"/api/keys/{name}", headers=AUTH)).json() == {"name": name, "deleted": True}
            r = await c.delete(f"/api/keys/{name}", headers=AUTH)
            assert r.status_code == 404 and r.json() == {"error": f"no key named {name!r}; GET /api/keys lists them"}
            r = await c.get("/api/keys")
            assert r.status_code == 401 and "needs an API key" in r.json()["error"]  # Ollama's envelope, as all of /api

    run(go())


def test_without_keys_management_is_refused_saying_how_to_enable_it(loaded):
    async def go():
        with served(loaded) as open_server:
            async with open_server.client() as c:
                r = await c.post("/api/keys", json={"name": "a"})
        assert r.status_code == 403 and "--api-key" in r.json()["error"]

    run(go())


@pytest.mark.parametrize("path,body,shape", [
    ("/v1/chat/completions", CHAT, lambda j: j["error"]["type"]),
    ("/v1/messages", {**CHAT, "max_tokens": 3}, lambda j: j["error"]["type"]),
    ("/api/chat", {**CHAT, "stream": False, "options": {"num_predict": 3}}, lambda j: j["error"]),
    ("/completion", {"prompt": "hi", "n_predict": 3}, lambda j: j["error"]["type"]),
])
def test_scope_and_rate_limits_answer_in_each_dialect(server, path, body, shape):
    async def go():
        async with server.client() as c:
            _, narrow = await new_key(c, scopes=["elsewhere"], limits={"rpm": 1})
            for _ in range(2):  # a request refused for its scope does not count against rpm
                r = await c.post(path, json=body, headers=bearer(narrow))
                assert r.status_code == 403, r.text
            assert shape(r.json()) in ("permission_error", r.json().get("error"))
            _, limited = await new_key(c, limits={"rpm": 1, "tpm": 1000})
            ok = await c.post(path, json=body, headers=bearer(limited))
            assert ok.status_code == 200, ok.text
            assert ok.headers["x-ratelimit-limit-requests"] == "1"
            assert ok.headers["x-ratelimit-remaining-requests"] == "0"
            assert ok.headers["x-ratelimit-limit-tokens"] == "1000"
            assert ok.headers["x-ratelimit-reset-requests"].endswith("s")
            r = await c.post(path, json=body, headers=bearer(limited))
            assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
            assert "requests per minute" in json.dumps(r.json())
            return r.json()

    refused = run(go())
    if path == "/v1/chat/completions":
        assert refused["error"]["code"] == "rate_limit_exceeded" and refused["error"]["type"] == "requests"
    if path == "/v1/messages":
        assert refused == {"type": "error", "error": {"type": "rate_limit_error", "message": refused["error"]["message"]}}
    if path == "/api/chat":
        assert set(refused) == {"error"} and isinstance(refused["error"], str)


def test_a_reservation_settles_to_the_tokens_used(server):
    async def go():
        async with server.client() as c:
            _, secret = await new_key(c, limits={"tpm": 5000})
            r = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 12}, headers=bearer(secret))
            used = r.json()["usage"]["total_tokens"]
            reserved = r.json()["usage"]["prompt_tokens"] + 12
            assert int(r.headers["x-ratelimit-remaining-tokens"]) == 5000 - reserved
            r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
            second_reserved = r.json()["usage"]["prompt_tokens"] + 3
            assert int(r.headers["x-ratelimit-remaining-tokens"]) == 5000 - used - second_reserved

    run(go())


def test_a_stream_holds_its_lease_until_it_ends_and_a_leaver_gives_it_back(server):
    async def go():
        async with server.client() as c:
            name, secret = await new_key(c, limits={"max_concurrent": 1})
            body = {**CHAT, "max_tokens": LONG, "ignore_eos": True, "stream": True}
            first = asyncio.ensure_future(c.post("/v1/chat/completions", json=body, headers=bearer(secret)))
            assert await async_wait_for(lambda: any(card.key == name for card in server.state.cards.in_flight.values()),
                                        timeout=10)
            r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
            assert r.status_code == 429 and r.json()["error"]["type"] == "concurrency"
            first.cancel()  # the client leaves mid-stream
            await asyncio.gather(first, return_exceptions=True)
            key = server.state.tenants.ring.get(name)
            assert await async_wait_for(
                lambda: _zero(server.state.tenants.limiter.in_flight(key)), timeout=10)
            r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
            assert r.status_code == 200

    run(go())


async def _zero(count):
    return await count == 0


def test_cancel_and_interrupt_from_a_second_connection(server):
    async def go():
        async with server.client() as c:
            name, secret = await new_key(c)
            outcomes = {}
            for how in ("cancel", "interrupt"):
                trace = f"trace-{how}"
                body = {**CHAT, "max_tokens": LONG, "ignore_eos": True, "stream": True}
                first = asyncio.ensure_future(c.post("/v1/chat/completions", json=body,
                                                     headers={**bearer(secret), "x-request-id": trace}))

                async def running():
                    r = await c.get(f"/v1/requests/{trace}", headers=bearer(secret))
                    return r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 2

                assert await async_wait_for(running, timeout=10)
                r = await c.post(f"/v1/requests/{trace}/{how}", headers=AUTH)
                assert r.status_code == 200, r.text
                stream = await first
                assert stream.headers["x-request-id"] == trace
                outcomes[how] = stream.text
                card = (await c.get(f"/v1/requests/{trace}", headers=bearer(secret))).json()
                assert card["state"] == {"cancel": "cancelled", "interrupt": "interrupted"}[how]
                assert card["key"] == name and card["route"] == "/v1/chat/completions"
                assert card["usage"]["completion_tokens"] < LONG and card["output"]
                assert 0 <= card["queue_time"] <= card["time_to_first_token"] <= card["duration"]
                again = await c.post(f"/v1/requests/{trace}/{how}", headers=AUTH)
                assert again.status_code == 409
            cancelled = outcomes["cancel"].strip().split("\n\n")
            assert cancelled[-1].startswith("event: error") and "cancelled" in cancelled[-1]
            interrupted = outcomes["interrupt"].strip().split("\n\n")
            assert interrupted[-1] == "data: [DONE]"
            assert json.loads(interrupted[-2][len("data: "):])["choices"][0]["finish_reason"] == "stop"

    run(go())


def test_a_key_sees_only_its_own_requests_and_usage(server):
    async def go():
        async with server.client() as c:
            a, secret_a = await new_key(c)
            b, secret_b = await new_key(c)
            await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret_a))
            await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret_b))
            seen = (await c.get("/v1/requests", headers=bearer(secret_a))).json()["data"]
            assert seen and {card["key"] for card in seen} == {a}
            all_cards = (await c.get("/v1/requests", headers=AUTH)).json()["data"]
            assert {a, b} <= {card["key"] for card in all_cards}
            other = next(card for card in all_cards if card["key"] == b)
            assert (await c.get(f"/v1/requests/{other['id']}", headers=bearer(secret_a))).status_code == 404
            mine = (await c.get("/api/usage", headers=bearer(secret_a))).json()
            assert {row["key"] for row in mine["data"]} == {a} and mine["totals"]["requests"] == 1
            r = await c.get(f"/api/usage?key={b}", headers=bearer(secret_a))
            assert r.status_code == 403
            r = await c.get("/api/usage?from=yesterday", headers=AUTH)
            assert r.status_code == 400 and r.json()["error"].startswith("from must be a UTC day")
            metrics = (await c.get("/metrics", headers=AUTH)).text
            assert f'inferd_key_requests_total{{key="{a}",model="tiny"}} 1.0' in metrics
            prompt = mine["totals"]["prompt_tokens"]
            assert f'inferd_key_tokens_total{{key="{a}",kind="prompt",model="tiny"}} {float(prompt)}' in metrics

    run(go())


def test_a_reused_trace_id_finds_each_keys_own_card_and_answers_name_their_cards(server):
    async def go():
        async with server.client() as c:
            a, secret_a = await new_key(c)
            b, secret_b = await new_key(c)
            reused = {"x-request-id": f"reused-{a}"}
            first = await c.post("/v1/chat/completions", json=CHAT, headers={**bearer(secret_a), **reused})
            again = await c.post("/v1/chat/completions", json=CHAT, headers={**bearer(secret_a), **reused})
            other = await c.post("/v1/chat/completions", json=CHAT, headers={**bearer(secret_b), **reused})
            named = [r.headers["x-inferd-request-card"] for r in (first, again, other)]
            assert len(set(named)) == 3 and all(r.headers["x-request-id"] == reused["x-request-id"]
                                                for r in (first, again, other))
            by_trace = {who: (await c.get(f"/v1/requests/{reused['x-request-id']}", headers=h)).json()
                        for who, h in (("a", bearer(secret_a)), ("b", bearer(secret_b)), ("admin", AUTH))}
            # a's newest, though b's is newer still; b's own; an admin sees the newest of all
            assert (by_trace["a"]["id"], by_trace["a"]["key"]) == (named[1], a)
            assert (by_trace["b"]["id"], by_trace["b"]["key"]) == (named[2], b)
            assert by_trace["admin"]["id"] == named[2]
            assert (await c.get(f"/v1/requests/{named[0]}", headers=bearer(secret_a))).json()["id"] == named[0]
            assert (await c.get(f"/v1/requests/{named[0]}", headers=bearer(secret_b))).status_code == 404
            listed = (await c.get("/v1/requests", params={"trace_id": reused["x-request-id"]}, headers=AUTH)).json()
            assert sorted(card["id"] for card in listed["data"]) == sorted(named)
            for path, body in (("/v1/chat/completions", {**CHAT, "stream": True}),
                               ("/api/chat", {**CHAT, "stream": True}), ("/v1/messages", {**CHAT, "stream": True})):
                async with c.stream("POST", path, json=body, headers=bearer(secret_a)) as streamed:
                    card_id = streamed.headers["x-inferd-request-card"]  # with the status line, before any token
                    await streamed.aread()
                assert (await c.get(f"/v1/requests/{card_id}", headers=bearer(secret_a))).json()["route"] == path
            unnamed = await c.get("/v1/models", headers=bearer(secret_a))  # opens no card: names none
            assert "x-inferd-request-card" not in unnamed.headers

    run(go())


def test_trace_ids_are_echoed_when_sane_and_made_otherwise(server):
    async def go():
        async with server.client() as c:
            kept = await c.get("/health", headers={"x-request-id": "abc-123"})
            made = await c.get("/health", headers={"x-request-id": "bad id\x7f"})
        assert kept.headers["x-request-id"] == "abc-123"
        assert made.headers["x-request-id"] != "bad id" and len(made.headers["x-request-id"]) == 32

    run(go())


def test_cors_preflight_is_answered_before_auth_and_exposes_the_limit_headers(server):
    async def go():
        async with server.client() as c:
            pre = await c.options("/v1/chat/completions", headers={
                "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type"})
            actual = await c.get("/v1/models", headers={**AUTH, "Origin": "https://app.example"})
            stranger = await c.options("/v1/chat/completions", headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in pre.headers["access-control-allow-headers"].lower()
        assert actual.headers["access-control-allow-origin"] == "https://app.example"
        exposed = actual.headers["access-control-expose-headers"]
        assert "x-ratelimit-remaining-tokens" in exposed and "x-inferd-request-card" in exposed
        assert stranger.status_code == 400

    run(go())


def test_per_key_cache_isolation(loaded):
    async def go():
        config = small_config(ctx_size=CTX, parallel=2, isolate_cache="per-key")
        with served(loaded, config, api_keys=frozenset({ADMIN})) as isolated:
            async with isolated.client() as c:
                _, a = await new_key(c)
                _, b = await new_key(c)
                prompt = {**CHAT, "messages": [{"role": "user", "content": "a shared system prompt " * 8}]}

                async def cached(secret):
                    r = await c.post("/v1/chat/completions", json=prompt, headers=bearer(secret))
                    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

                assert await cached(a) == 0
                assert await cached(a) > 0  # a key hits its own blocks
                assert await cached(b) == 0  # never another key's

    run(go())


def test_twenty_keys_four_hundred_requests_exact_counts(server):
    """Every answer is a 200 with usage or a 429; the ledger's totals equal the
    sum of the 200s' usage; no key is ever seen above its max_concurrent."""
    rng = random.Random(7)

    async def go():
        async with server.client() as c:
            keys = []
            for i in range(20):
                limits = {"max_concurrent": 1 + i % 4, "rpm": rng.choice([2, 3, 5, 0]),
                          "tpm": rng.choice([0, 400, 2000])}
                keys.append((*await new_key(c, limits=limits), limits))
            peak: dict[str, int] = defaultdict(int)
            done = asyncio.Event()

            cards = server.state.cards
            opened = cards.open

            def open_and_count(card):  # every opening, exactly: the in-flight cards of its key
                opened(card)
                in_flight = sum(1 for c in cards.in_flight.values() if c.key == card.key)
                peak[card.key] = max(peak[card.key], in_flight)
                return card

            cards.open = open_and_count

            async def sample():
                """What /v1/requests shows in flight, every 100 ms."""
                while not done.is_set():
                    listed = (await c.get("/v1/requests", headers=AUTH)).json()["data"]
                    in_flight = Counter(card["key"] for card in listed if card["state"] in ("queued", "running"))
                    for name, n in in_flight.items():
                        peak[name] = max(peak[name], n)
                    await asyncio.sleep(0.1)

            async def one(name, secret):
                body = {**CHAT, "max_tokens": rng.randint(1, 3)}
                return name, await c.post("/v1/chat/completions", json=body, headers=bearer(secret))

            sampler = asyncio.ensure_future(sample())
            answers = await asyncio.gather(*(one(name, secret) for name, secret, _ in keys for _ in range(20)))
            done.set()
            await sampler
            del cards.open
            usage = (await c.get("/api/usage", headers=AUTH)).json()["data"]
            return keys, answers, usage, peak

    keys, answers, usage, peak = run(go())
    names = {name for name, _, _ in keys}
    assert {r.status_code for _, r in answers} <= {200, 429}
    expected = defaultdict(lambda: Counter())
    for name, r in answers:
        expected[name]["requests"] += 1
        if r.status_code == 200:
            u = r.json()["usage"]
            expected[name]["prompt_tokens"] += u["prompt_tokens"]
            expected[name]["completion_tokens"] += u["completion_tokens"]
        else:
            expected[name]["errors"] += 1
    ledger = defaultdict(lambda: Counter())
    for row in usage:
        if row["key"] in names:
            for field in ("requests", "prompt_tokens", "completion_tokens", "errors"):
                ledger[row["key"]][field] += row[field]
    assert {n: +c for n, c in ledger.items()} == {n: +c for n, c in expected.items()}
    assert sum(r.status_code == 200 for _, r in answers) > 0
    for name, _, limits in keys:
        assert peak[name] <= limits["max_concurrent"], (name, peak[name], limits)
        ok = sum(1 for n, r in answers if n == name and r.status_code == 200)
        if limits["rpm"]:
            assert ok <= limits["rpm"]


def test_embeddings_are_admitted_for_scope_and_tokens(loaded):
    async def go():
        with served(loaded, small_config(ctx_size=CTX, pooling="mean"), api_keys=frozenset({ADMIN})) as pooled:
            async with pooled.client() as c:
                _, narrow = await new_key(c, scopes=["elsewhere"])
                r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "hi"}, headers=bearer(narrow))
                assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
                _, small = await new_key(c, limits={"tpm": 5})
                r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a b c d e f g h"},
                                 headers=bearer(small))
                assert r.status_code == 429 and r.json()["error"]["type"] == "tokens"
                name, fine = await new_key(c, limits={"tpm": 1000})
                r = await c.post("/v1/embeddings", json={"model": "tiny", "input": ["hi", "there"]},
                                 headers=bearer(fine))
                assert r.status_code == 200, r.text
                used = r.json()["usage"]["prompt_tokens"]
                assert int(r.headers["x-ratelimit-remaining-tokens"]) == 1000 - used
                usage = (await c.get(f"/api/usage?key={name}", headers=AUTH)).json()["totals"]
                assert (usage["requests"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, used, 0)

    run(go())


def test_keys_usage_and_last_use_survive_a_restart_and_no_secret_is_stored(loaded, tmp_path):
    """Two servers one after the other on one data dir, as `inferd serve` builds them."""
    from inferd.server.app import build_app
    from inferd.server.assemble import attach_model, new_state
    from served import client

    def start():
        state = new_state(small_config(ctx_size=CTX), "tiny", frozenset({ADMIN}), key_store_dir=tmp_path)
        attach_model(state, loaded)
        return state, build_app(state)

    async def first():
        state, app = start()
        try:
            async with client(app) as c:
                name, secret = await new_key(c, limits={"rpm": 9})
                r = await c.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
                listed = (await c.get("/api/keys", headers=AUTH)).json()["data"]
        finally:
            state.engine.shutdown()
            state.tenants.close()
        return name, secret, r.json()["usage"], next(k for k in listed if k["name"] == name)

    name, secret, used, before = run(first())
    files = list(tmp_path.glob("tenants.sqlite3*"))
    assert files and not any(secret.encode() in f.read_bytes() or ADMIN.encode() in f.read_bytes() for f in files)

    async def second():
        state, app = start()
        try:
            async with client(app) as c:
                listed = (await c.get("/api/keys", headers=AUTH)).json()["data"]
                models = await c.get("/v1/models", headers=bearer(secret))
        finally:
            state.engine.shutdown()
            state.tenants.close()
        return next(k for k in listed if k["name"] == name), models.status_code

    after, status = run(second())
    assert status == 200 and after["limits"]["rpm"] == 9
    assert before["last_used_at"] is not None and after["last_used_at"] == pytest.approx(before["last_used_at"])
    assert (after["usage_today"]["prompt_tokens"], after["usage_today"]["completion_tokens"]) == \
        (used["prompt_tokens"], used["completion_tokens"])


def test_without_keys_a_generating_request_still_logs_its_trace_id(loaded, caplog):
    async def go():
        with served(loaded, small_config(ctx_size=CTX)) as open_server:
            async with open_server.client() as c:
                return await c.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "open-trace"})

    with caplog.at_level("INFO", logger="inferd.requests"):
        r = run(go())
    assert r.status_code == 200 and r.headers["x-request-id"] == "open-trace"
    assert re.search(r"POST /v1/chat/completions model=tiny status=200 queue_ms=\d+ ttft_ms=\d+ trace=open-trace",
                     caplog.text)


def test_a_stream_ends_with_the_workers_count_when_a_router_asks(server):
    body = {**CHAT, "ignore_eos": True}

    async def go():
        async with server.client() as c:
            whole = (await c.post("/v1/chat/completions", json=body, headers=AUTH)).json()["usage"]
            asked = await c.post("/v1/chat/completions", json={**body, "stream": True},
                                 headers={**AUTH, "x-inferd-report-usage": "1"})
            plain = await c.post("/v1/chat/completions", json={**body, "stream": True}, headers=AUTH)
            return whole, asked.text, plain.text

    whole, asked, plain = run(go())
    *events, comment = asked.strip().split("\n\n")
    assert events[-1] == "data: [DONE]" and comment.startswith(": usage ")
    counted = json.loads(comment[len(": usage "):])
    assert (counted["prompt_tokens"], counted["completion_tokens"]) == (whole["prompt_tokens"], 3)
    assert 0 < counted["prompt_tokens_details"]["cached_tokens"] < whole["prompt_tokens"]  # the first one's prefix
    assert plain.strip().split("\n\n")[-1] == "data: [DONE]" and ": usage" not in plain


def test_audio_is_admitted_for_the_keys_scopes(server):
    async def go():
        async with server.client() as c:
            _, narrow = await new_key(c, scopes=["tiny"])
            r = await c.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi"}, headers=bearer(narrow))
            assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
            r = await c.post("/v1/audio/transcriptions", data={"model": "whisper-1"},
                             files={"file": ("a.wav", b"not audio", "audio/wav")}, headers=bearer(narrow))
            assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"

    run(go())
