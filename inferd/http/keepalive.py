"""Keep-alive comments in a stream of server-sent events.

A proxy drops a connection that stays silent too long, and a request can
wait in the queue or behind a long prefill before its first event. So
whenever `interval` passes without an event, the reader gets a comment.

One task reads the events for the whole stream, at most two ahead of the
reader, and a timer armed once per interval (not once per event) wakes a
reader that has waited that long. A task and a timed `asyncio.wait` per
event, the simple way, cost 13 µs an event against 5 here: CPU that every
streamed token takes from the engine's threads (BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

KEEPALIVE_SECONDS = 15.0
KEEPALIVE_COMMENT = ": keep-alive\n\n"

_EVENT, _QUIET, _END, _FAILED = range(4)


class _Handoff:
    """One slot between the task reading the events and the stream's reader."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float):
        self.loop, self.interval = loop, interval
        self.slot: tuple | None = None
        self.waiter: asyncio.Future | None = None  # the reader's, while the slot is empty
        self.space: asyncio.Future | None = None  # the read task's, while the slot is full
        self.last = loop.time()  # when the reader last got something
        self.timer = loop.call_at(self.last + interval, self._tick)

    async def put(self, item: tuple) -> None:
        while self.slot is not None:
            self.space = self.loop.create_future()
            await self.space
        if self.waiter is not None and not self.waiter.done():
            self._wake(item)
        else:
            self.slot = item

    async def take(self) -> tuple:
        if self.slot is not None:
            item, self.slot = self.slot, None
            if self.space is not None and not self.space.done():
                self.space.set_result(None)
        else:
            self.waiter = self.loop.create_future()
            item = await self.waiter
        self.last = self.loop.time()
        return item

    def close(self) -> None:
        self.timer.cancel()

    def _wake(self, item: tuple) -> None:
        waiter, self.waiter = self.waiter, None
        waiter.set_result(item)

    def _tick(self) -> None:
        now = self.loop.time()
        if now - self.last >= self.interval and self.waiter is not None and not self.waiter.done():
            self._wake((_QUIET, None))
            self.last = now
        self.timer = self.loop.call_at(self.last + self.interval, self._tick)


async def _read(events: AsyncIterator[str], handoff: _Handoff) -> None:
    try:
        async for event in events:
            await handoff.put((_EVENT, event))
        await handoff.put((_END, None))
    except asyncio.CancelledError:
        raise
    except BaseException as e:  # the reader raises it
        await handoff.put((_FAILED, e))


async def with_keepalive(events: AsyncIterator[str], interval: float = KEEPALIVE_SECONDS) -> AsyncIterator[str]:
    """Yield `events`, with a comment whenever `interval` passes without one.
    Closing this stream (a client gone) cancels the read and closes `events`."""
    loop = asyncio.get_running_loop()
    iterator = events.__aiter__()
    handoff = _Handoff(loop, interval)
    reader = loop.create_task(_read(iterator, handoff))
    try:
        while True:
            kind, value = await handoff.take()
            if kind == _EVENT:
                yield value
            elif kind == _QUIET:
                yield KEEPALIVE_COMMENT
            elif kind == _END:
                return
            else:
                raise value
    finally:
        handoff.close()
        reader.cancel()
        # Let the cancelled read unwind before closing the generator it runs in.
        await asyncio.gather(reader, return_exceptions=True)
        await iterator.aclose()
