"""The audio threads: a bounded number of jobs, a 503 with Retry-After past
it, items as they are made, errors raised in the reader, and a reader that
leaves stopping its job."""

from __future__ import annotations

import asyncio
import threading

import pytest

from inferd.audio.executor import AudioExecutor
from inferd.http.errors import ServiceUnavailable


def run(coroutine):
    return asyncio.run(coroutine)


def test_items_come_back_in_order_and_the_place_is_freed():
    async def go():
        executor = AudioExecutor(parallel=1, queue=0)
        items = await executor.run(lambda stop: iter([1, 2, 3]))
        await asyncio.sleep(0.05)  # the release is a callback from the finished thread
        return items, executor.admitted

    assert run(go()) == ([1, 2, 3], 0)


def test_past_parallel_plus_queue_is_a_503_with_retry_after():
    async def go():
        executor = AudioExecutor(parallel=1, queue=1)
        gate = threading.Event()

        def held(stop):
            gate.wait(5)
            yield "done"

        first, second = executor.stream(held), executor.stream(held)
        with pytest.raises(ServiceUnavailable) as refused:
            executor.stream(held)
        gate.set()
        assert [x async for x in first] == ["done"] and [x async for x in second] == ["done"]
        return refused.value

    error = run(go())
    assert error.status == 503 and error.headers == {"Retry-After": "2"} and error.code == "audio_queue_full"
    assert "1 running, 1 waiting" in error.message


def test_an_error_in_the_job_is_raised_in_the_reader():
    def failing(stop):
        yield 1
        raise ValueError("bad audio")

    async def go():
        executor = AudioExecutor(parallel=1, queue=0)
        seen = []
        with pytest.raises(ValueError, match="bad audio"):
            async for item in executor.stream(failing):
                seen.append(item)
        return seen

    assert run(go()) == [1]


def test_a_reader_that_leaves_stops_the_job():
    made = []

    def endless(stop):
        while not stop.is_set():
            made.append(len(made))
            yield made[-1]

    async def go():
        executor = AudioExecutor(parallel=1, queue=0)
        items = executor.stream(endless)
        assert await anext(items) == 0
        await items.aclose()
        for _ in range(100):
            if executor.admitted == 0:
                break
            await asyncio.sleep(0.01)
        return executor.admitted

    assert run(go()) == 0
    count = len(made)
    assert count < 10_000  # stopped, not run on


@pytest.mark.parametrize(("parallel", "queue", "message"), [(0, 1, "--audio-parallel"), (1, -1, "--audio-queue")])
def test_bad_sizes_name_their_option(parallel, queue, message):
    with pytest.raises(ValueError, match=message):
        AudioExecutor(parallel, queue)
