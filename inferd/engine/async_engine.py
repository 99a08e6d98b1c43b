"""The interface the HTTP server uses: submit a request, read an async
stream of deltas, abort by id.

The engine loop runs on its own thread; the asyncio side only validates,
enqueues commands and reads per-request queues, so nothing blocks the event
loop. When a reader falls behind, its pending deltas are merged into one.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.errors import EngineDeadError, QueueFullError, RequestRejected
from inferd.engine.kv_events import KvEventHub, KvSubscription
from inferd.engine.outputs import EngineStats, RequestOutput
from inferd.models.process_memory import release_freed_memory

log = logging.getLogger(__name__)

SHUTTING_DOWN = "the server is shutting down; send the request again"


@dataclass
class _Abort:
    request_id: str


class _Call:
    """Run a function on the engine thread and hand its result back."""

    def __init__(self, fn):
        self.fn = fn
        self.done = threading.Event()
        self.result = None
        self.error: BaseException | None = None


class RequestStream:
    """Deltas of one request, merged when the reader falls behind. `close()`
    before the final delta aborts the request in the engine."""

    def __init__(self, engine: "AsyncEngine", request_id: str):
        self.engine = engine
        self.request_id = request_id
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.finished = False

    def __aiter__(self) -> "RequestStream":
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        out = await self.queue.get()
        while not out.finished and not self.queue.empty():
            out.merge(self.queue.get_nowait())
        self.finished = out.finished
        return out

    def close(self) -> None:
        self.engine._streams.pop(self.request_id, None)
        if not self.finished:
            self.finished = True
            self.engine.abort(self.request_id)


class AsyncEngine:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="inferd-engine", daemon=True)
        self._pending = 0  # added but not yet seen by the engine thread
        self._trimmed = True  # the heap was handed back since the last step with work
        self._stats = engine.stats()
        self._thread.start()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    # -- asyncio side --------------------------------------------------------
    def add_request(self, request: EngineRequest) -> RequestStream:
        """Validate and submit; errors are raised here, before any output, and
        the engine thread admits the request without checking it again. Must
        be called from the event loop that will read the stream."""
        if self._stop.is_set():
            raise EngineDeadError("the engine has shut down")
        if request.request_id in self._streams:
            raise RequestRejected(f"request id {request.request_id!r} is already in flight")
        self.engine.validate(request)
        if self._stats.waiting + self._pending >= self.engine.config.max_queue:
            raise QueueFullError(f"the waiting queue is full ({self.engine.config.max_queue} requests, --max-queue)")
        stream = RequestStream(self, request.request_id)
        self._streams[request.request_id] = (asyncio.get_running_loop(), stream.queue)
        if self._stop.is_set():  # stopped since the check above, perhaps after the last requests were failed
            self._streams.pop(request.request_id, None)
            raise EngineDeadError("the engine has shut down")
        self._pending += 1
        self._commands.put(request)
        return stream

    async def generate(self, request: EngineRequest) -> AsyncIterator[RequestOutput]:
        """`add_request`, then its deltas; leaving early aborts the request."""
        stream = self.add_request(request)
        try:
            async for out in stream:
                yield out
        finally:
            stream.close()

    def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    async def call(self, fn):
        """Run `fn(engine)` between steps on the engine thread."""
        call = _Call(fn)
        self._commands.put(call)
        await asyncio.get_running_loop().run_in_executor(None, self._wait, call)
        if call.error is not None:
            raise call.error
        return call.result

    def _wait(self, call: _Call) -> None:
        # A call queued as the engine stopped never runs: do not wait for it forever.
        while not call.done.wait(0.5):
            if not self._thread.is_alive() and not call.done.is_set():
                call.error = EngineDeadError("the engine has shut down")
                return

    async def subscribe_kv_events(self) -> KvSubscription:
        """The cached block hashes now, then every change after them. Taken
        between steps, so no change falls between the snapshot and the stream.
        Read it on this event loop; `close()` it when done."""
        if self._stop.is_set():
            raise EngineDeadError("the engine has shut down")
        loop = asyncio.get_running_loop()
        return await self.call(lambda engine: engine.kv_events.subscribe(loop))

    @property
    def kv_events(self) -> KvEventHub:
        return self.engine.kv_events

    def stats(self) -> EngineStats:
        """The snapshot taken after the latest step (never blocks)."""
        return self._stats

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._commands.put(None)
        self._thread.join(timeout)
        self.engine.kv_events.close()

    # -- engine thread -------------------------------------------------------
    def _loop(self) -> None:
        engine = self.engine
        try:
            engine.settle_weights()  # off the server's start-up; a request arriving meanwhile waits for it
        except Exception:  # the weights stay where they were: slower steps, the same results
            log.exception("could not move the weights onto 2 MB pages")
        while not self._stop.is_set():
            try:
                self._drain_commands(block=not engine.has_work)
                if self._stop.is_set():
                    break
                outputs = engine.step()
            except Exception:
                log.exception("engine step failed; ending the requests in flight")
                outputs = engine.fail_all("internal engine error; see the server log")
            self._stats = engine.stats()
            if outputs:
                self._trimmed = False
            # Before the outputs: a client that has its answer finds its blocks in the events already.
            engine.kv_events.publish()
            self._deliver_all(outputs)
        self._deliver_all(self._stopped_outputs())

    def _stopped_outputs(self) -> list[RequestOutput]:
        """An error for every request still in flight, admitted or still queued."""
        outputs = self.engine.fail_all(SHUTTING_DOWN)
        failed = {out.request_id for out in outputs}
        outputs += [RequestOutput(request_id, finished=True, finish_reason="error", error=SHUTTING_DOWN)
                    for request_id in list(self._streams) if request_id not in failed]
        for out in outputs:
            out.error_is_shutdown = True
        return outputs

    def _drain_commands(self, block: bool) -> None:
        while True:
            try:
                cmd = self._commands.get(block=block, timeout=0.5 if block else None)
            except queue.Empty:
                if block and not self._trimmed:
                    # Idle for one wait: give the OS back what a burst freed, which glibc's
                    # heaps would keep (each thread's arena grows to its busiest moment).
                    release_freed_memory()
                    self._trimmed = True
                return
            block = False
            if cmd is None:
                return
            if isinstance(cmd, EngineRequest):
                self._pending -= 1
                if cmd.request_id not in self._streams:
                    continue  # the reader went away before the engine saw it
                try:
                    self.engine.admit(cmd)  # validated by add_request
                except Exception as e:  # this request alone fails; admit leaves no trace of it
                    self._deliver(_admission_failed(cmd.request_id, e))
            elif isinstance(cmd, _Abort):
                out = self.engine.abort(cmd.request_id)
                if out is not None:
                    self._deliver(out)
            elif isinstance(cmd, _Call):
                try:
                    cmd.result = cmd.fn(self.engine)
                except Exception as e:  # the caller re-raises it
                    cmd.error = e
                finally:
                    cmd.done.set()

    def _deliver(self, out: RequestOutput) -> None:
        self._deliver_all([out])

    def _deliver_all(self, outputs: list[RequestOutput]) -> None:
        """A step's outputs reach each event loop in one callback: one wake-up
        of the loop per step, not one per sequence."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for out in outputs:
            target = self._streams.get(out.request_id)
            if target is not None:
                loop, stream = target
                by_loop.setdefault(loop, []).append((stream, out))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_put_each, items)


def _admission_failed(request_id: str, error: Exception) -> RequestOutput:
    if isinstance(error, (ValueError, RuntimeError)):  # the engine's own refusals say what to change
        message = str(error)
    else:
        log.error("request %s: admission failed", request_id, exc_info=error)
        message = f"the engine could not admit this request ({type(error).__name__}); see the server log"
    return RequestOutput(request_id, finished=True, finish_reason="error", error=message,
                         error_is_client=isinstance(error, ValueError))


def _put_each(items: list[tuple[asyncio.Queue, RequestOutput]]) -> None:
    for stream, out in items:
        stream.put_nowait(out)
