"""AsyncEngine: streaming from the engine thread, abort on close, errors."""

from __future__ import annotations

import asyncio

import pytest

from inferd.config import EngineConfig
from inferd.engine.async_engine import SHUTTING_DOWN, AsyncEngine
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.errors import EngineDeadError, RequestRejected
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model
from validation_counter import count_validation


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    async_engine = AsyncEngine(Engine(loaded, EngineConfig(ctx_size=128, parallel=4, block_size=4)))
    yield async_engine
    async_engine.shutdown()


async def collect(engine, rid, params, prompt=(2, 40, 41, 42)):
    outs = []
    async for out in engine.generate(EngineRequest(rid, list(prompt), params)):
        outs.append(out)
    return outs


def test_streams_deltas_until_finished(engine):
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    outs = asyncio.run(collect(engine, "a", params))
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert sum(len(o.token_ids) for o in outs) == 8
    assert outs[-1].usage.completion_tokens == 8 and outs[-1].usage.prompt_tokens == 4


def test_concurrent_requests_all_finish(engine):
    async def main():
        params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
        return await asyncio.gather(*(collect(engine, f"c{i}", params, (2, 10 + i, 11)) for i in range(6)))

    for outs in asyncio.run(main()):
        assert outs[-1].finished and sum(len(o.token_ids) for o in outs) == 6


def test_closing_the_stream_aborts_and_frees_blocks(engine):
    async def main():
        params = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
        stream = engine.generate(EngineRequest("gone", [2, 50, 51], params))
        await stream.__anext__()
        await stream.aclose()
        for _ in range(100):  # the abort is applied between steps
            used = await engine.call(lambda e: (e.pool.num_used, e.has_work))
            if used == (0, False):
                return used
            await asyncio.sleep(0.02)
        return used

    assert asyncio.run(main()) == (0, False)


def test_invalid_request_raises_before_streaming(engine):
    async def main():
        with pytest.raises(RequestRejected):
            await collect(engine, "bad", SamplingParams(max_tokens=1), prompt=[2] * 200)
        # and the engine keeps serving
        return await collect(engine, "next", SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))

    assert asyncio.run(main())[-1].finished


def test_validation_runs_once_on_the_callers_side_and_not_again_on_the_engine_thread(engine, monkeypatch):
    counts = count_validation(monkeypatch)
    outs = asyncio.run(collect(engine, "once", SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)))
    assert outs[-1].finish_reason == "length"
    assert counts == {"validate": 1, "check_fits": 1}


def test_errors_raise_from_add_request_itself(engine):
    async def main():
        with pytest.raises(RequestRejected, match="context size"):
            engine.add_request(EngineRequest("long", [2] * 200, SamplingParams(max_tokens=1)))
        params = SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
        stream = engine.add_request(EngineRequest("twice", [2, 7, 8], params))
        try:
            with pytest.raises(RequestRejected, match="already in flight"):
                engine.add_request(EngineRequest("twice", [2, 7, 8], params))
        finally:
            stream.close()

    asyncio.run(main())


class RaisingConstraint:
    """Allows every token; `accept` fails (a broken grammar object)."""

    def fill_mask(self, bitmask, row):
        pass

    def accept(self, token_id):
        raise RuntimeError("accept blew up")

    finished = False
    error = None


def test_one_requests_failure_ends_only_that_request(engine, monkeypatch):
    import inferd.engine.engine as engine_module

    real = engine_module.StopRules

    def stop_rules(params, *args, **kw):
        if params.max_tokens == 7:  # the request "admit-fails"
            raise MemoryError("no room")
        return real(params, *args, **kw)

    monkeypatch.setattr(engine_module, "StopRules", stop_rules)
    greedy = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)

    async def main():
        good = asyncio.create_task(collect(engine, "neighbour", greedy, (2, 60, 61)))
        await asyncio.sleep(0)
        step_fails = collect_request(engine, EngineRequest("step-fails", [2, 62, 63], greedy, constraint=RaisingConstraint()))
        admit_fails = collect(engine, "admit-fails", SamplingParams(max_tokens=7), (2, 64, 65))
        # bounded: a dead engine thread would leave every stream waiting forever
        return await asyncio.wait_for(asyncio.gather(good, step_fails, admit_fails), 30)

    good, step_fails, admit_fails = asyncio.run(main())
    assert good[-1].finish_reason == "length" and sum(len(o.token_ids) for o in good) == 30
    for outs in (step_fails, admit_fails):
        assert outs[-1].finished and outs[-1].finish_reason == "error" and outs[-1].error
        assert "internal engine error" not in outs[-1].error


async def collect_request(engine, request):
    return [out async for out in engine.generate(request)]


def test_a_huge_loop_guard_is_refused_at_add_request_and_the_engine_keeps_serving(engine):
    async def main():
        for size in (10**12, 10**7):
            with pytest.raises(ValueError, match="max_pattern_size"):
                engine.add_request(EngineRequest("huge", [2, 3], SamplingParams(max_tokens=4, max_pattern_size=size, min_count=2)))
        return await collect(engine, "after", SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))

    assert asyncio.run(main())[-1].finish_reason == "length"


def test_stopping_ends_running_and_waiting_requests_with_the_shutdown_error(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    stopping = AsyncEngine(Engine(loaded, EngineConfig(ctx_size=128, parallel=1, block_size=4)))

    async def main():
        params = SamplingParams(max_tokens=120, temperature=0.0, ignore_eos=True)
        streams = [stopping.add_request(EngineRequest(f"s{i}", [2, 60 + i], params)) for i in range(3)]
        first = await streams[0].__anext__()  # one runs; two wait for its slot
        assert not first.finished
        await asyncio.get_running_loop().run_in_executor(None, stopping.shutdown)
        lasts = []
        for stream in streams:
            outs = [out async for out in stream]
            lasts.append(outs[-1])
        return lasts

    for last in asyncio.run(main()):
        assert (last.finished, last.finish_reason, last.error) == (True, "error", SHUTTING_DOWN)
        assert last.error_is_shutdown and not last.error_is_client
    with pytest.raises(EngineDeadError):
        stopping.add_request(EngineRequest("late", [2, 3], SamplingParams(max_tokens=1)))



def test_an_idle_engine_hands_freed_heap_back_once(engine, monkeypatch):
    import inferd.engine.async_engine as async_engine_module

    trims = []
    monkeypatch.setattr(async_engine_module, "release_freed_memory", lambda: trims.append(1))
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    asyncio.run(collect(engine, "burst", params))
    for _ in range(40):  # one idle wait is 0.5 s
        if trims:
            break
        asyncio.run(asyncio.sleep(0.1))
    asyncio.run(asyncio.sleep(1.2))  # two more idle waits: still once
    assert trims == [1]


def test_a_failed_move_of_the_weights_leaves_the_engine_serving(tiny_model_dir, monkeypatch, caplog):
    def fail(net):
        raise RuntimeError("no pages today")

    monkeypatch.setattr("inferd.engine.engine.place_blocks_on_huge_pages", fail)
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    async_engine = AsyncEngine(Engine(loaded, EngineConfig(ctx_size=128, parallel=2, block_size=4)))
    try:
        outs = asyncio.run(collect(async_engine, "m", SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)))
    finally:
        async_engine.shutdown()
    assert outs[-1].finished and sum(len(o.token_ids) for o in outs) == 4
    assert "could not move the weights onto 2 MB pages" in caplog.text
