"""Audio jobs on their own threads, bounded (--audio-parallel, --audio-queue).

A job is a generator run on a worker thread; its items come back to the
event loop as they are made, so a transcription can stream segment by
segment and speech sentence by sentence while text streams go on. At most
`parallel` jobs run and `queue` more wait; one past that is refused at once
with a 503 and Retry-After. A reader that stops early (a client gone) makes
the job stop at its next item; its place is free only once its thread is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from inferd.http.errors import ServiceUnavailable

T = TypeVar("T")
RETRY_AFTER_SECONDS = 2


class AudioExecutor:
    def __init__(self, parallel: int, queue: int):
        if parallel < 1:
            raise ValueError("--audio-parallel must be at least 1")
        if queue < 0:
            raise ValueError("--audio-queue must be 0 or more")
        self.parallel, self.queue = parallel, queue
        self.admitted = 0  # running + waiting; touched on the event loop only
        self._pool: ThreadPoolExecutor | None = None  # made on first use: text-only servers start no threads

    def stream(self, job: Callable[[threading.Event], Iterator[T]]) -> AsyncIterator[T]:
        """`job(stop)`'s items, made on a worker thread. Admission is decided
        and the job submitted now (ServiceUnavailable when full); closing the
        iterator sets `stop`, which the job sees after its current item."""
        if self.admitted >= self.parallel + self.queue:
            raise ServiceUnavailable(
                f"the server is busy with audio ({self.parallel} running, {self.queue} waiting); retry shortly",
                code="audio_queue_full", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()

        def produce() -> None:
            try:
                for item in job(stop):
                    loop.call_soon_threadsafe(queue.put_nowait, (item, None))
                    if stop.is_set():
                        return
                loop.call_soon_threadsafe(queue.put_nowait, (_END, None))
            except BaseException as error:  # handed to the reader, who raises it in its own task
                loop.call_soon_threadsafe(queue.put_nowait, (_END, error))

        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="inferd-audio")
        self.admitted += 1
        loop.run_in_executor(self._pool, produce).add_done_callback(self._release)
        return _read(queue, stop)

    async def run(self, job: Callable[[threading.Event], Iterator[T]]) -> list[T]:
        """Every item of the job, once it has finished."""
        items = self.stream(job)
        try:
            return [item async for item in items]
        finally:
            await items.aclose()

    def _release(self, _) -> None:
        self.admitted -= 1

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


_END = object()


async def _read(queue: asyncio.Queue, stop: threading.Event) -> AsyncIterator:
    try:
        while True:
            item, error = await queue.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        stop.set()
