"""Dynamic batching of pooled forwards under a token budget.

Requests that arrive together run together: while one batch computes, new
requests queue; the next batch takes from every waiting request in turn
(round robin, one input at a time, each request's inputs shortest first), so a
request with a thousand inputs or one long input shares each batch with the
small ones that arrived behind it instead of making them wait for all of it.
A batch holds at most `max_batch_tokens` padded tokens (inputs x the longest),
or a single input when one alone is longer.

The gathering runs as a task on the event loop and does no heavy work; each
forward runs on `run`'s thread (its own for an encoder, the chat engine's for
a chat model), so the loop keeps answering.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from inferd.engine.embedding.model import PooledInput, PooledOutput
from inferd.engine.errors import EngineDeadError, QueueFullError

log = logging.getLogger(__name__)

RunBatch = Callable[[list[PooledInput]], Awaitable[list[PooledOutput]]]


class _Job:
    """One request's inputs and results; `order` is the inputs shortest first."""

    def __init__(self, inputs: Sequence[PooledInput], future: asyncio.Future):
        self.inputs = inputs
        self.order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        self.taken = 0
        self.results: list[PooledOutput | None] = [None] * len(inputs)
        self.left = len(inputs)
        self.future = future


class PooledBatcher:
    def __init__(self, run: RunBatch, max_batch_tokens: int, max_queue: int):
        self.run = run
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self._jobs: list[_Job] = []  # waiting for a batch, in arrival order
        self._worker: asyncio.Task | None = None
        self._closed = False
        self.batches = 0  # forwards run, for tests and metrics

    async def submit(self, inputs: Sequence[PooledInput]) -> list[PooledOutput]:
        """The result of every input, in order. Raises QueueFullError when
        --max-queue requests are already waiting; cancelling the caller drops
        its inputs not yet computed."""
        if self._closed:
            raise EngineDeadError("the server is shutting down; send the request again")
        if not inputs:
            return []
        if len(self._jobs) >= self.max_queue:
            raise QueueFullError(f"the embedding queue is full ({self.max_queue} requests, --max-queue)")
        loop = asyncio.get_running_loop()
        job = _Job(inputs, loop.create_future())
        self._jobs.append(job)
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._worker = loop.create_task(self._work())
        try:
            return await job.future
        finally:  # answered, failed, or the caller went away: nothing of it stays queued
            if not job.future.done():
                job.future.cancel()
            self._drop(job)

    @property
    def waiting(self) -> int:
        """Requests with inputs not yet taken into a batch."""
        return len(self._jobs)

    def close(self) -> None:
        """Fail what waits; what is computing finishes."""
        self._closed = True
        for job in self._jobs:
            if not job.future.done():
                job.future.set_exception(EngineDeadError("the server is shutting down; send the request again"))
        self._jobs.clear()

    async def _work(self) -> None:
        while self._jobs:
            batch, owners = self._take()
            self.batches += 1
            try:
                results = await self.run(batch)
            except Exception as error:  # the forward failed: its requests fail, the rest go on
                log.exception("a pooled forward of %d inputs failed", len(batch))
                for job, _ in owners:
                    if not job.future.done():
                        job.future.set_exception(error)
                    self._drop(job)
                continue
            for (job, index), result in zip(owners, results):
                job.results[index] = result
                job.left -= 1
                if job.left == 0 and not job.future.done():
                    job.future.set_result(job.results)

    def _take(self) -> tuple[list[PooledInput], list[tuple[_Job, int]]]:
        batch: list[PooledInput] = []
        owners: list[tuple[_Job, int]] = []
        longest = 0
        open_jobs = [job for job in self._jobs if job.taken < len(job.inputs)]
        while open_jobs:
            still_open = []
            for job in open_jobs:
                index = job.order[job.taken]
                size = len(job.inputs[index])
                if batch and (len(batch) + 1) * max(longest, size) > self.max_batch_tokens:
                    continue  # this job's next input does not fit; others' may
                batch.append(job.inputs[index])
                owners.append((job, index))
                longest = max(longest, size)
                job.taken += 1
                if job.taken < len(job.inputs):
                    still_open.append(job)
            open_jobs = still_open
        # Fully taken jobs leave the queue; they finish as their batches do.
        self._jobs = [job for job in self._jobs if job.taken < len(job.inputs)]
        return batch, owners

    def _drop(self, job: _Job) -> None:
        if job in self._jobs:
            self._jobs.remove(job)
