"""The pooled-forward batcher: requests that arrive together run together,
under a token budget, sharing each batch round robin so a big request never
starves a small one; a caller that leaves takes its inputs out of the queue."""

from __future__ import annotations

import asyncio

import pytest
from inferd.engine.embedding.batcher import PooledBatcher
from inferd.engine.embedding.model import PooledInput
from inferd.engine.errors import EngineDeadError, QueueFullError


class Recorder:
    """A forward that records each batch (as (request tag, length) pairs) and
    answers each input with its tag; `gate` holds a batch until released."""

    def __init__(self, hold: bool = False):
        self.batches: list[list[tuple[str, int]]] = []
        self.hold = hold
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, batch):
        self.batches.append([(item.ids[0], len(item)) for item in batch])
        self.started.set()
        if self.hold:
            await self.release.wait()
        await asyncio.sleep(0)
        return [f"{item.ids[0]}:{len(item)}" for item in batch]


def inputs(tag: str, *lengths: int) -> list[PooledInput]:
    return [PooledInput([tag] * n) for n in lengths]


def test_requests_that_arrive_together_run_together_and_answer_in_order():
    async def go():
        run = Recorder()
        batcher = PooledBatcher(run, max_batch_tokens=100, max_queue=8)
        results = await asyncio.gather(*(batcher.submit(inputs(t, 3, 1, 2)) for t in "abc"))
        return run.batches, results

    batches, results = asyncio.run(go())
    assert len(batches) == 1
    # Round robin, each request's inputs shortest first.
    assert batches[0] == [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("b", 2), ("c", 2), ("a", 3), ("b", 3), ("c", 3)]
    assert results == [[f"{t}:3", f"{t}:1", f"{t}:2"] for t in "abc"]


def test_a_batch_holds_at_most_the_budget_in_padded_tokens():
    async def go():
        run = Recorder()
        batcher = PooledBatcher(run, max_batch_tokens=100, max_queue=8)
        await batcher.submit(inputs("a", *[30] * 7, 10, 250))
        return run.batches

    batches = asyncio.run(go())
    # 10 + 30 + 30 = 3 x 30 padded; a fourth 30 would make 120. The 250 runs alone.
    assert [[n for _, n in b] for b in batches] == [[10, 30, 30], [30, 30, 30], [30, 30], [250]]


def test_a_small_request_arriving_behind_a_big_one_shares_its_next_batch():
    async def go():
        run = Recorder(hold=True)
        batcher = PooledBatcher(run, max_batch_tokens=40, max_queue=8)
        big = asyncio.create_task(batcher.submit(inputs("big", *[10] * 12)))
        await run.started.wait()  # the first batch (four of big's inputs) is computing
        small = asyncio.create_task(batcher.submit(inputs("small", 10)))
        await asyncio.sleep(0)
        run.hold = False
        run.release.set()
        await small
        done_before_big = not big.done()
        await big
        return run.batches, done_before_big

    batches, done_before_big = asyncio.run(go())
    assert [tag for tag, _ in batches[0]] == ["big"] * 4
    assert [tag for tag, _ in batches[1]] == ["big", "small", "big", "big"]
    assert done_before_big


def test_a_caller_that_leaves_takes_its_inputs_out_of_the_queue():
    async def go():
        run = Recorder(hold=True)
        batcher = PooledBatcher(run, max_batch_tokens=20, max_queue=8)
        first = asyncio.create_task(batcher.submit(inputs("a", 10, 10)))
        await run.started.wait()
        gone = asyncio.create_task(batcher.submit(inputs("gone", 10, 10, 10)))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        run.hold = False
        run.release.set()
        await first
        await asyncio.sleep(0.01)
        return run.batches

    assert all(tag == "a" for batch in asyncio.run(go()) for tag, _ in batch)


def test_a_failed_forward_fails_its_requests_and_the_next_ones_run():
    async def go():
        calls = []

        async def run(batch):
            calls.append(len(batch))
            if len(calls) == 1:
                raise RuntimeError("boom")
            return [0.5] * len(batch)

        batcher = PooledBatcher(run, max_batch_tokens=10, max_queue=8)
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.submit(inputs("a", 10))
        return await batcher.submit(inputs("b", 5, 5))

    assert asyncio.run(go()) == [0.5, 0.5]


def test_a_full_queue_and_a_closed_batcher_refuse():
    async def go():
        run = Recorder(hold=True)
        batcher = PooledBatcher(run, max_batch_tokens=10, max_queue=1)
        first = asyncio.create_task(batcher.submit(inputs("a", 10, 10)))
        await run.started.wait()  # "a" has one input still waiting: the queue holds one request
        with pytest.raises(QueueFullError, match="--max-queue"):
            await batcher.submit(inputs("b", 1))
        batcher.close()
        with pytest.raises(EngineDeadError):
            await first
        with pytest.raises(EngineDeadError):
            await batcher.submit(inputs("c", 1))
        run.release.set()

    asyncio.run(go())
