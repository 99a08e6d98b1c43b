"""A fleet behind `inferd router`, end to end: a real etcd, three `inferd
serve` workers on the tiny model registered under one prefix, and router
processes watching it (two kv-aware replicas, one round-robin for the
locality comparison), driven by the official OpenAI SDK.

The module's workers and routers are shared; the fault tests start their
own extra worker and kill it, so the shared fleet is three workers again
when each test ends.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import httpx
import openai
import pytest

from fleet import (
    TTL, cache_counters, fleet_ids, long_context_model, registered_worker, reset_caches, router_metric,
    start_all, stop_all, worker_id,
)
from inferd.bench.words import WORDS
from inferd.discovery.record import worker_key
from polling import async_wait_for, wait_for
from router_process import RouterProcess

aetcd = pytest.importorskip("aetcd", reason="the etcd extra is not installed (pip install 'inferd[etcd]')")

PREFIX = "/test-fleet/workers/"  # this module's workers only
WORKER_HEADER = "x-inferd-worker"
# Replica 2's balance thresholds for the flood: with --balance-rel 1.0 the
# rule reads "imbalanced when busiest - idlest > --balance-abs".
BALANCE_ABS, BALANCE_REL = 2, 1.0
LEAVE_SLACK = 10.0  # seconds past the lease TTL a busy machine may take to expire it and tell the routers


def text(rng: random.Random, chars: int) -> str:
    """Random words from the benchmark word list, about `chars` characters."""
    words = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def async_openai(router: RouterProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0, timeout=120.0)


async def async_fleet(router: RouterProcess) -> dict[str, dict]:
    async with httpx.AsyncClient(base_url=router.base_url, timeout=5.0) as http:
        return {w["id"]: w for w in (await http.get("/v1/workers")).json()["data"]}


def etcd_get(etcd, key: bytes):
    async def go():
        async with aetcd.Client(etcd.host, etcd.port, timeout=5) as client:
            return await client.get(key)

    return asyncio.run(go())


# -- the fleet ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet_model(tiny_model_dir, tmp_path_factory):
    """The tiny model with room for long outputs: requests that must still run when a test acts need them."""
    return long_context_model(tiny_model_dir, tmp_path_factory.mktemp("tiny-4k"))


@pytest.fixture(scope="module")
def workers(fleet_model, etcd_server, server_logs):
    servers = [registered_worker(fleet_model, etcd_server, PREFIX, server_logs / f"fleet-worker-{i}.log")
               for i in range(3)]
    try:
        yield start_all(servers)
    finally:
        stop_all(servers)


@pytest.fixture(autouse=True)
def workers_survive(request):
    """After each test, the shared workers still run: a crash is reported as one, with its log."""
    yield
    if "workers" not in request.fixturenames:
        return
    dead = [w for w in request.getfixturevalue("workers") if w.returncode is not None]
    assert not dead, "\n".join(f"worker {worker_id(w)} exited with {w.returncode}:\n{w.log_tail(20)}" for w in dead)


@pytest.fixture(scope="module")
def routers(workers, etcd_server, server_logs):
    def router(name: str, policy: str | None = None, *extra: str) -> RouterProcess:
        return RouterProcess(etcd=etcd_server.address, etcd_prefix=PREFIX, policy=policy, wait_workers=3,
                             extra_args=list(extra), log_path=server_logs / f"fleet-router-{name}.log")

    procs = {
        "replica1": router("replica1"),  # kv-aware with its defaults
        "replica2": router("replica2", None, "--balance-abs", str(BALANCE_ABS), "--balance-rel", str(BALANCE_REL)),
        "round-robin": router("round-robin", "round-robin"),
    }
    try:
        start_all(procs.values())
        yield procs
    finally:
        stop_all(procs.values())


@pytest.fixture(scope="module")
def replica1(routers):
    return routers["replica1"]


@pytest.fixture(scope="module")
def replica2(routers):
    return routers["replica2"]


@pytest.fixture(scope="module")
def round_robin(routers):
    return routers["round-robin"]


@pytest.fixture(scope="module")
def model(workers):
    return workers[0].model_name


@pytest.fixture()
def extra_worker(fleet_model, etcd_server, server_logs, request):
    """A fourth worker for a test to kill; whatever the test does, it is gone afterwards."""
    started = []

    def start(**kwargs):
        server = registered_worker(fleet_model, etcd_server, PREFIX,
                                   server_logs / f"fleet-{request.node.name}.log", **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


def wait_listed(routers_, wid: str, present: bool = True, timeout: float = 10.0) -> bool:
    return wait_for(lambda: all((wid in fleet_ids(r)) == present for r in routers_), timeout)


# -- fleet view --------------------------------------------------------------------
def test_both_replicas_list_the_three_registered_workers(workers, replica1, replica2):
    expected = {worker_id(w): w for w in workers}
    for router in (replica1, replica2):
        assert wait_for(lambda: fleet_ids(router) == set(expected), timeout=10.0), router.fleet()
        view = {w["id"]: w for w in router.fleet()}
        assert {wid: (v["url"], v["model"], v["source"], v["state"], v["parallel"], v["capabilities"])
                for wid, v in view.items()} == \
            {wid: (w.base_url, w.model_name, "etcd", "ready", 4, ["kv-events"]) for wid, w in expected.items()}
        assert router.health().json() == {"status": "ok", "workers": 3}


# -- locality ----------------------------------------------------------------------
CONVERSATIONS, TURNS = 6, 4
SYSTEM_CHARS = 600  # ~37 KV blocks of 16 byte-tokens: most of each prompt


def conversations() -> list[tuple[str, list[str]]]:
    rng = random.Random(6)
    return [(text(rng, SYSTEM_CHARS), [text(rng, 40) for _ in range(TURNS)]) for _ in range(CONVERSATIONS)]


def run_conversations(router: RouterProcess, model: str) -> list[list[str]]:
    """Each conversation turn by turn, one after another; the worker of every turn."""
    placement = []
    with router.openai() as client:
        for system, questions in conversations():
            messages = [{"role": "system", "content": system}]
            turns = []
            for question in questions:
                messages.append({"role": "user", "content": question})
                raw = client.chat.completions.with_raw_response.create(
                    model=model, messages=messages, max_tokens=4, temperature=0)
                answer = raw.parse()
                assert answer.choices[0].finish_reason in ("length", "stop")
                turns.append(raw.headers[WORKER_HEADER])
                messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            placement.append(turns)
    return placement


def hit_rate_of(workers, run) -> tuple[float, object]:
    """The workers' summed prefix-cache hit rate over `run()`, from cold caches; and what `run` returned."""
    reset_caches(workers)
    queries0, hits0 = cache_counters(workers)
    result = run()
    queries1, hits1 = cache_counters(workers)
    assert queries1 > queries0
    return (hits1 - hits0) / (queries1 - queries0), result


def test_conversations_stay_on_one_worker_and_hit_the_cache_more_than_round_robin(
        workers, replica1, round_robin, model):
    ids = {worker_id(w) for w in workers}
    kv_rate, kv_placement = hit_rate_of(workers, lambda: run_conversations(replica1, model))
    rr_rate, rr_placement = hit_rate_of(workers, lambda: run_conversations(round_robin, model))

    # kv-aware, fleet idle between sequential requests: every turn where the first went;
    # first turns go by load, rotating over equally idle workers: two conversations each.
    assert all(len(set(turns)) == 1 for turns in kv_placement), kv_placement
    assert Counter(turns[0] for turns in kv_placement) == {wid: 2 for wid in ids}, kv_placement
    # round-robin: turns rotate over the three workers, so only turn 4 meets turn 1's prefix.
    assert all(len(set(turns[:3])) == 3 and turns[3] == turns[0] for turns in rr_placement), rr_placement
    assert kv_rate >= 2 * rr_rate, f"prefix-cache hit rate: kv-aware {kv_rate:.3f}, round-robin {rr_rate:.3f}"
    assert kv_rate > 0.5, f"kv-aware hit rate {kv_rate:.3f}"


# -- one fleet view ----------------------------------------------------------------
def test_a_request_through_replica2_works_and_both_replicas_see_the_same_workers(
        workers, replica1, replica2, model):
    with replica2.openai() as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0,
            extra_body={"ignore_eos": True})
    answer = raw.parse()
    assert answer.usage.completion_tokens == 5 and answer.choices[0].finish_reason == "length"
    assert raw.headers[WORKER_HEADER] in {worker_id(w) for w in workers}

    def view(router):
        return sorted((w["id"], w["url"], w["model"], w["state"]) for w in router.fleet())

    assert view(replica1) == view(replica2) == sorted(
        (worker_id(w), w.base_url, w.model_name, "ready") for w in workers)


# -- balance -----------------------------------------------------------------------
FLOOD, FLOOD_TOKENS = 24, 300
# kv-aware never routes to a worker already more than --balance-abs above the idlest
# (with --balance-rel 1.0): a request takes its worker to at most idlest + abs + 1. With
# the other two at least the idlest and FLOOD requests in all, no worker ever holds more.
PEAK_BOUND = (FLOOD + 2 * (BALANCE_ABS + 1)) // 3


@pytest.mark.slow
def test_a_flood_of_one_prefix_spreads_within_the_balance_thresholds(workers, replica2, model):
    prompt = text(random.Random(24), 800)
    samples: list[dict[str, int]] = []

    async def flood():
        finished = asyncio.Event()

        async def sample():
            async with httpx.AsyncClient(base_url=replica2.base_url, timeout=5.0) as http:
                while not finished.is_set():
                    data = (await http.get("/v1/workers")).json()["data"]
                    samples.append({w["id"]: w["in_flight"] for w in data})
                    await asyncio.sleep(0.01)  # the sampling period

        async def one(client):
            raw = await client.completions.with_raw_response.create(
                model=model, prompt=prompt, max_tokens=FLOOD_TOKENS, temperature=0, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            finish = tokens = None
            async for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
            return raw.headers[WORKER_HEADER], finish, tokens

        sampler = asyncio.create_task(sample())
        try:
            async with async_openai(replica2) as client:
                return await asyncio.gather(*(one(client) for _ in range(FLOOD)))
        finally:
            finished.set()
            await sampler

    results = asyncio.run(flood())
    assert [(finish, tokens) for _, finish, tokens in results] == [("length", FLOOD_TOKENS)] * FLOOD
    counts = Counter(wid for wid, _, _ in results)
    assert set(counts) == {worker_id(w) for w in workers}, f"not every worker got requests: {counts}"
    busiest = max(max(s.values()) for s in samples)
    assert max(sum(s.values()) for s in samples) > BALANCE_ABS + 1, \
        f"the flood never overlapped enough to need balancing: {samples}"
    assert busiest <= PEAK_BOUND, f"a worker held {busiest} in flight (bound {PEAK_BOUND}): {samples}"
    # While all FLOOD are in flight nothing has finished, so the loads are the router's choices alone.
    everything_in_flight = [s for s in samples if sum(s.values()) == FLOOD]
    assert all(max(s.values()) - min(s.values()) <= BALANCE_ABS + 1 for s in everything_in_flight), \
        everything_in_flight


# -- faults ------------------------------------------------------------------------
def test_a_worker_killed_under_load_fails_only_its_streams_and_leaves_the_fleet(
        workers, replica1, replica2, model, extra_worker):
    victim = extra_worker(parallel=8)  # every request sent to it runs at once: streams are streaming
    vid = worker_id(victim)
    assert wait_listed((replica1, replica2), vid), f"{vid} never joined: {replica1.fleet()}"
    survivors = {worker_id(w) for w in workers}
    rng = random.Random(5)
    prefix = text(rng, 600)  # the victim's: once it holds it, kv-aware sends it there
    others = [text(rng, 200) for _ in range(4)]
    retries0 = router_metric(replica1, "inferd_router_retries_total")
    cuts0 = router_metric(replica1, "inferd_router_stream_errors_total")

    async def scenario():
        async with async_openai(replica1) as client:
            await client.completions.create(model=model, prompt=prefix + " warm", max_tokens=1,
                                            extra_headers={"X-Worker-Id": vid})

            async def stream(prompt: str, max_tokens: int, started: asyncio.Event):
                raw = await client.completions.with_raw_response.create(
                    model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                    extra_body={"ignore_eos": True})
                chunks, finish = 0, None
                try:
                    async for chunk in raw.parse():
                        chunks += 1
                        started.set()
                        finish = chunk.choices[0].finish_reason if chunk.choices else finish
                except openai.APIError as e:
                    return raw.headers[WORKER_HEADER], chunks, e.body
                return raw.headers[WORKER_HEADER], chunks, finish

            async def whole(prompt: str, max_tokens: int):
                raw = await client.completions.with_raw_response.create(
                    model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                    extra_body={"ignore_eos": True})
                return raw.headers[WORKER_HEADER], raw.parse().usage.completion_tokens

            def streams(prompts: list[str], max_tokens: int):
                starts = [asyncio.Event() for _ in prompts]
                tasks = [asyncio.create_task(stream(p, max_tokens, e)) for p, e in zip(prompts, starts)]
                return tasks, asyncio.wait_for(asyncio.gather(*(e.wait() for e in starts)), 60)

            # The victim's streams first (its prefix goes to it), then load for the others (it is
            # the busiest now, so that goes elsewhere), then the victim's non-streaming requests.
            victim_streams, started = streams([f"{prefix} stream {i}" for i in range(3)], 3000)
            await started
            other_streams, started = streams(others[:2], 300)
            other_wholes = [asyncio.create_task(whole(p, 300)) for p in others[2:]]
            await started
            victim_wholes = [asyncio.create_task(whole(f"{prefix} whole {i}", 800)) for i in range(3)]
            assert await async_wait_for(lambda: _in_flight_is(replica1, vid, 6), timeout=30), \
                await async_fleet(replica1)
            victim.proc.kill()
            killed = asyncio.get_running_loop().time()

            async def gone_from_both() -> float | None:
                fleets = [await async_fleet(r) for r in (replica1, replica2)]
                return None if any(vid in f for f in fleets) else asyncio.get_running_loop().time() - killed

            left_after = asyncio.create_task(async_wait_for(gone_from_both, timeout=TTL + LEAVE_SLACK, interval=0.1))
            outcomes = [await asyncio.gather(*tasks) for tasks in (victim_streams, victim_wholes, other_streams,
                                                                    other_wholes)]
            return outcomes, await left_after

    outcomes, left_after = asyncio.run(asyncio.wait_for(scenario(), 120))
    victim_streams, victim_wholes, other_streams, other_wholes = outcomes

    # Streams already under way on the victim end with the router's error event.
    for wid, chunks, outcome in victim_streams:
        assert wid == vid and chunks >= 1
        assert isinstance(outcome, dict) and outcome["code"] == "worker_failed", outcome
        assert vid in outcome["message"]
    # Non-streaming answers had not reached the client: retried on a survivor, complete.
    assert [(wid in survivors, tokens) for wid, tokens in victim_wholes] == [(True, 800)] * 3, victim_wholes
    assert router_metric(replica1, "inferd_router_retries_total") - retries0 == 3
    assert router_metric(replica1, "inferd_router_stream_errors_total") - cuts0 == 3
    # The rest of the load never touched the victim.
    assert [(wid in survivors, outcome) for wid, _, outcome in other_streams] == [(True, "length")] * 2
    assert [(wid in survivors, tokens) for wid, tokens in other_wholes] == [(True, 300)] * 2

    # Its lease ran out: both replicas dropped it within the TTL (plus slack for a busy machine).
    assert left_after is not None, \
        f"{vid} outlived its {TTL}s lease in a router's fleet: {replica1.fleet()} {replica2.fleet()}"
    assert fleet_ids(replica1) == fleet_ids(replica2) == survivors
    # The victim's prefix would have gone to it; now nothing does.
    after = []
    with replica1.openai() as client:
        for i in range(10):
            raw = client.completions.with_raw_response.create(model=model, prompt=f"{prefix} after {i}",
                                                              max_tokens=2, temperature=0)
            after.append((raw.http_response.status_code, raw.headers[WORKER_HEADER] in survivors))
    assert after == [(200, True)] * 10


async def _in_flight_is(router: RouterProcess, wid: str, count: int) -> bool:
    return (await async_fleet(router)).get(wid, {}).get("in_flight") == count


def test_a_worker_sigtermed_leaves_the_fleet_first_and_finishes_its_stream(
        workers, replica1, replica2, model, etcd_server, extra_worker):
    drainer = extra_worker(parallel=2, shutdown_timeout=60)
    did = worker_id(drainer)
    assert wait_listed((replica1, replica2), did), f"{did} never joined: {replica1.fleet()}"
    survivors = {worker_id(w) for w in workers}
    tokens = 1200

    async def scenario():
        started = asyncio.Event()
        seen = {"chunks": 0, "done": False}

        async def stream(client):
            raw = await client.completions.with_raw_response.create(
                model=model, prompt="Hello", max_tokens=tokens, temperature=0, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
                extra_headers={"X-Worker-Id": did})
            finish = usage = None
            async for chunk in raw.parse():
                seen["chunks"] += 1
                started.set()
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
                if chunk.usage:
                    usage = chunk.usage.completion_tokens
            seen["done"] = True
            return raw.headers[WORKER_HEADER], finish, usage

        async def dropped_by_both() -> bool:
            fleets = [await async_fleet(r) for r in (replica1, replica2)]
            return all(did not in f for f in fleets)

        async with async_openai(replica1) as client:
            task = asyncio.create_task(stream(client))
            await asyncio.wait_for(started.wait(), 60)
            drainer.terminate()
            dropped = await async_wait_for(dropped_by_both, timeout=10.0, interval=0.005)
            at_drop = dict(seen, alive=drainer.returncode is None)
            return dropped, at_drop, await task

    dropped, at_drop, (wid, finish, usage) = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert dropped, f"the routers still list {did} after SIGTERM:\n{drainer.log_tail()}"
    assert at_drop["alive"] and not at_drop["done"], f"the worker left only after its stream ended: {at_drop}"
    assert etcd_get(etcd_server, worker_key(PREFIX, did)) is None
    assert (wid, finish, usage) == (did, "length", tokens)
    assert drainer.wait(30) == 0, drainer.log_tail()
    assert "deregistered " in drainer.log()

    later = []
    for router in (replica1, replica2):
        with router.openai() as client:
            for i in range(5):
                raw = client.completions.with_raw_response.create(model=model, prompt=f"after {i}", max_tokens=2,
                                                                  temperature=0)
                later.append((raw.http_response.status_code, raw.headers[WORKER_HEADER] in survivors))
    assert later == [(200, True)] * 10
