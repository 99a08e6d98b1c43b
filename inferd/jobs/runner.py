"""Runs every active job: validates its input, runs its pending items through
a dispatch function the server provides, and ends it (completed, cancelled,
expired, failed) with the output its kind makes.

Batch items share `concurrency` slots (by default as many as the engine's
sequence slots: an interactive request preempts a batch item); a
background response runs at once. On start the runner picks up every job
a previous process left active: its pending items run, its done ones stay
as they are. Shutting down leaves jobs active for the next start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from inferd.jobs.lock import RunnerLock
from inferd.jobs.store import Item, ItemResult, Job, JobStore

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 1.0
# Set on the scope of a background response's run: the id it was given when it was queued.
RESPONSE_ID = "inferd.response_id"


class Retry(Exception):
    """The item cannot run now (the engine is loading or full, a key's rate is spent): try again later."""

    def __init__(self, after: float, why: str):
        super().__init__(why)
        self.after = after


class InvalidInput(Exception):
    """A job's input cannot run; `errors` say where (OpenAI's {code, message, param, line})."""

    def __init__(self, errors: list[dict]):
        super().__init__(f"{len(errors)} errors")
        self.errors = errors


Dispatch = Callable[[Job, Item], Awaitable[ItemResult]]


@dataclass
class JobKind:
    """What a kind of job adds to the common course."""

    # validating -> the items to run; raises InvalidInput
    prepare: Callable[[Job], Awaitable[list[tuple[str, dict]]]] | None = None
    # once no item runs any more: returns what goes into the job's result (output files)
    finish: Callable[[Job], Awaitable[dict]] | None = None
    # an item that starts running (a background response becomes in_progress)
    started: Callable[[Job, Item], Awaitable[None]] | None = None
    # an item's result, once stored
    done: Callable[[Job, Item, ItemResult], Awaitable[None]] | None = None
    shares_slots: bool = True  # batch items share the runner's slots; a background response does not


class JobRunner:
    def __init__(self, store: JobStore, dispatch: Dispatch, kinds: dict[str, JobKind], concurrency: int,
                 clock: Callable[[], float] = time.time, sweep: Callable[[], int] | None = None):
        """`sweep`: run on a worker thread every pass of the loop (deleting expired files)."""
        self.store, self.dispatch, self.kinds, self.clock, self.sweep = store, dispatch, kinds, clock, sweep
        self.slots = asyncio.Semaphore(max(1, concurrency))
        self._jobs: dict[str, asyncio.Task] = {}
        self._items: dict[str, set[asyncio.Task]] = {}
        self._stop_flags: dict[str, asyncio.Event] = {}  # set by cancel or expiry
        self._ended: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.lock = RunnerLock(store.path.with_name("jobs.lock"))

    # -- control -------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop running; what was in flight stays pending for the next start."""
        tasks = [t for t in (self._task, *self._jobs.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.lock.release()

    def wake(self) -> None:
        self._wake.set()

    async def cancel(self, id: str) -> bool:
        """Stops the job's items (those in the engine are aborted); False when it had already ended."""
        if not await asyncio.to_thread(self.store.request_cancel, id):
            return False
        self._interrupt(id)
        self.wake()
        return True

    async def wait(self, id: str, timeout: float) -> None:
        """Until the job has ended, or `timeout` seconds."""
        ended = self._ended.get(id)
        if ended is not None:
            try:
                await asyncio.wait_for(ended.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def _interrupt(self, id: str) -> None:
        flag = self._stop_flags.get(id)
        if flag is not None:
            flag.set()
        for task in self._items.get(id, ()):
            task.cancel()

    # -- the loop ------------------------------------------------------------
    async def _loop(self) -> None:
        if not self.lock.try_acquire():
            log.warning("another server runs the jobs in %s; this one stores new jobs and runs them only once "
                        "that server stops", self.store.path.parent)
            while not self.lock.try_acquire():
                await asyncio.sleep(5.0)
        while True:
            try:
                for job in await asyncio.to_thread(self.store.active):
                    if job.id not in self._jobs:
                        self._ended.setdefault(job.id, asyncio.Event())
                        self._stop_flags[job.id] = asyncio.Event()
                        self._jobs[job.id] = asyncio.ensure_future(self._run_logged(job))
                if self.sweep is not None:
                    await asyncio.to_thread(self.sweep)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the job store or sweeping expired files failed; trying again")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), 5.0)
            except asyncio.TimeoutError:
                pass

    async def _run_logged(self, job: Job) -> None:
        try:
            await self._run(job)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s failed", job.id)
            await asyncio.to_thread(self.store.set_state, job.id, "failed",
                                    result={"errors": [{"code": "server_error", "message": "the job failed on the "
                                                        "server; see its log", "param": None, "line": None}]})
        finally:
            self._jobs.pop(job.id, None)
            self._items.pop(job.id, None)
            self._stop_flags.pop(job.id, None)
            ended = self._ended.pop(job.id, None)
            if ended is not None:
                ended.set()

    async def _run(self, job: Job) -> None:
        kind = self.kinds[job.kind]
        stop = self._stop_flags[job.id]
        expiry = None
        if job.expires_at is not None:
            left = job.expires_at - self.clock()
            if left <= 0:  # its window passed while no server ran: no item starts
                stop.set()
            else:
                expiry = asyncio.get_running_loop().call_later(left, self._interrupt, job.id)
        try:
            if job.state == "validating" and not job.cancel_requested:
                try:
                    items = await kind.prepare(job) if kind.prepare else []
                except InvalidInput as invalid:
                    await asyncio.to_thread(self.store.set_state, job.id, "failed", result={"errors": invalid.errors})
                    return
                await asyncio.to_thread(self.store.add_items, job.id, items, "in_progress")
            elif job.state == "queued":
                await asyncio.to_thread(self.store.set_state, job.id, "in_progress", event="started")
            if job.state != "finalizing":
                await self._run_items(job, kind, stop)
        finally:
            if expiry is not None:
                expiry.cancel()
        await self._end(job, kind)

    async def _run_items(self, job: Job, kind: JobKind, stop: asyncio.Event) -> None:
        running: set[asyncio.Task] = set()
        self._items[job.id] = running
        last_progress = [self.clock()]
        try:
            for item in await asyncio.to_thread(self.store.pending_items, job.id):
                if stop.is_set() or not await self._slot(kind, stop):
                    break
                task = asyncio.ensure_future(self._run_item(job, kind, item, last_progress))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.gather(*list(running), return_exceptions=True)
        except asyncio.CancelledError:  # the server stops: in-flight items stay pending
            for task in list(running):
                task.cancel()
            raise

    async def _slot(self, kind: JobKind, stop: asyncio.Event) -> bool:
        """A free slot for the next item, or False when the job was stopped meanwhile."""
        if not kind.shares_slots:
            return True
        acquire = asyncio.ensure_future(self.slots.acquire())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((acquire, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if acquire.done() and not acquire.cancelled():
            if stop.is_set():
                self.slots.release()
                return False
            return True
        acquire.cancel()
        return False

    async def _run_item(self, job: Job, kind: JobKind, item: Item, last_progress: list[float]) -> None:
        try:
            if kind.started is not None:
                await kind.started(job, item)
            while True:
                try:
                    result = await self.dispatch(job, item)
                    break
                except Retry as retry:
                    log.debug("job %s item %d waits %.1fs: %s", job.id, item.idx, retry.after, retry)
                    await asyncio.sleep(retry.after)
            if await asyncio.to_thread(self.store.finish_item, job.id, item.idx, result):
                if kind.done is not None:
                    await kind.done(job, item, result)
                now = self.clock()
                if now - last_progress[0] >= PROGRESS_SECONDS:
                    last_progress[0] = now
                    counts = (await asyncio.to_thread(self.store.get, job.id)).counts
                    await asyncio.to_thread(self.store.add_event, job.id, "progress", counts)
        finally:
            if kind.shares_slots:
                self.slots.release()

    async def _end(self, job: Job, kind: JobKind) -> None:
        current = await asyncio.to_thread(self.store.get, job.id)
        if current is None:  # deleted meanwhile
            return
        if current.cancel_requested:
            final, leftover = "cancelled", "canceled"
        elif job.expires_at is not None and self.clock() >= job.expires_at and current.counts.get("pending"):
            final, leftover = "expired", "expired"
        else:
            final, leftover = "completed", None
        if leftover is not None:
            await asyncio.to_thread(self.store.end_pending, job.id, leftover)
        elif current.counts.get("pending"):
            return  # stopped before its items ran: it stays active
        if final == "completed":
            await asyncio.to_thread(self.store.set_state, job.id, "finalizing")
        result = await kind.finish(await asyncio.to_thread(self.store.get, job.id)) if kind.finish else {}
        counts = (await asyncio.to_thread(self.store.get, job.id)).counts
        await asyncio.to_thread(self.store.set_state, job.id, final, result=result, event="finished",
                                data={"state": final, **counts})
