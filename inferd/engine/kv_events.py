"""Prefix-cache events: which block hashes this engine holds, for routers
that send each prompt where its prefix is already cached.

A subscriber gets a `KvSnapshot` (every cached hash and the blocks in use),
then one `KvUpdate` per engine step that changed either. Hashes are the
prefix cache's own chain (`inferd.prefix_hash`, 32 hex digits each, so JSON
carries them as strings without loss), and a router hashes a prompt the
same way to count how many leading blocks a worker has.

Threads: the pool reports to a `KvEventLog` on the engine thread, and the
hub's `subscribe` and `publish` run there too, between steps; that is what
makes a snapshot and the updates after it add up exactly. Each subscription
is read on its own asyncio loop; updates cross over with
`call_soon_threadsafe`. `close` may be called from any thread.

An unwatched engine pays one `is None` test per cached or evicted block:
the log is attached to the pool only while someone subscribes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

from inferd.engine.kv_cache import BlockPool
from inferd.prefix_hash import BlockHash

log = logging.getLogger(__name__)

# Updates a reader may leave unread before it is dropped; a dropped reader
# reconnects and starts again from a fresh snapshot.
DEFAULT_MAX_PENDING = 1024


@dataclass(frozen=True)
class KvSnapshot:
    block_size: int  # tokens per block
    hashes: list[BlockHash]  # every cached block's hash
    active_blocks: int  # blocks in use by running requests (the pool's num_used)


@dataclass(frozen=True)
class KvUpdate:
    """One step's net change: `stored` and `removed` never share a hash, so
    the order a reader applies them in does not matter."""

    stored: list[BlockHash]
    removed: list[BlockHash]
    active_blocks: int


class KvEventLog:
    """The pool's listener: hashes stored and removed since the last `take`.
    A hash stored then removed within one step (or the reverse) cancels out."""

    def __init__(self) -> None:
        self._stored: dict[BlockHash, None] = {}  # dicts keep the order blocks were cached in
        self._removed: dict[BlockHash, None] = {}

    def block_stored(self, h: BlockHash) -> None:
        if h in self._removed:
            del self._removed[h]
        else:
            self._stored[h] = None

    def block_removed(self, h: BlockHash) -> None:
        if h in self._stored:
            del self._stored[h]
        else:
            self._removed[h] = None

    def take(self) -> tuple[list[BlockHash], list[BlockHash]]:
        stored, removed = list(self._stored), list(self._removed)
        self._stored.clear()
        self._removed.clear()
        return stored, removed


_END = object()  # the queue item that ends a subscription


class KvSubscription:
    """One reader: `snapshot`, then `await next()` for each update; `None`
    means the stream has ended (closed, the hub closed, or `dropped`
    because the reader fell `max_pending` updates behind)."""

    def __init__(self, snapshot: KvSnapshot, loop: asyncio.AbstractEventLoop, max_pending: int):
        self.snapshot = snapshot
        self.active_blocks = snapshot.active_blocks  # as of the latest update read
        self.dropped = False
        self.closed = False  # read by the engine thread, which then forgets this reader
        self._loop = loop
        self._max_pending = max_pending
        self._queue: asyncio.Queue = asyncio.Queue()
        self._ended = False  # touched on the reader's loop only

    async def next(self) -> KvUpdate | None:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # every later call sees the end too
            return None
        self.active_blocks = item.active_blocks
        return item

    def __aiter__(self) -> KvSubscription:
        return self

    async def __anext__(self) -> KvUpdate:
        update = await self.next()
        if update is None:
            raise StopAsyncIteration
        return update

    def close(self) -> None:
        """Stop listening; the engine forgets this reader at its next step."""
        self.closed = True

    # -- the engine thread's side -------------------------------------------
    def offer(self, update: KvUpdate) -> None:
        self._send(update)

    def end(self) -> None:
        self.closed = True
        self._send(_END)

    def _send(self, item) -> None:
        try:
            self._loop.call_soon_threadsafe(self._put, item)
        except RuntimeError:  # the reader's loop has closed
            self.closed = True

    def _put(self, item) -> None:
        if self._ended:
            return
        if item is not _END and self._queue.qsize() >= self._max_pending:
            log.warning("a KV-event reader fell %d updates behind; dropping it", self._max_pending)
            self.dropped = self.closed = True
            while not self._queue.empty():  # free what it will never read
                self._queue.get_nowait()
            item = _END
        if item is _END:
            self._ended = True
        self._queue.put_nowait(item)


class KvEventHub:
    """Fans one pool's events out to every subscription."""

    def __init__(self, pool: BlockPool, max_pending: int = DEFAULT_MAX_PENDING):
        self.pool = pool
        self.max_pending = max_pending
        self._log = KvEventLog()
        self._subs: list[KvSubscription] = []
        self._active = pool.num_used  # as last published
        self._closed = False
        self._lock = threading.Lock()  # `close` may come from another thread

    @property
    def num_subscribers(self) -> int:
        return len(self._subs)

    def subscribe(self, loop: asyncio.AbstractEventLoop) -> KvSubscription:
        """Engine thread, between steps. Changes not yet published go to the
        existing readers first; the new one gets them inside its snapshot."""
        self.publish()
        pool = self.pool
        self._active = pool.num_used
        sub = KvSubscription(KvSnapshot(pool.block_size, list(pool.cached), pool.num_used), loop, self.max_pending)
        with self._lock:
            if self._closed:
                sub.end()
                return sub
            self._subs.append(sub)
            pool.listener = self._log
        return sub

    def publish(self) -> None:
        """Engine thread, after each step: one update for the whole step."""
        if self.pool.listener is None:
            return
        with self._lock:
            self._subs = [s for s in self._subs if not s.closed]
            if not self._subs:
                self.pool.listener = None
                self._log.take()
                return
            subs = list(self._subs)
        stored, removed = self._log.take()
        active = self.pool.num_used
        if not stored and not removed and active == self._active:
            return
        self._active = active
        update = KvUpdate(stored, removed, active)
        for sub in subs:
            sub.offer(update)

    def close(self) -> None:
        """End every stream and refuse new ones (the server is draining)."""
        with self._lock:
            self._closed = True
            subs, self._subs = self._subs, []
        # The pool is the engine thread's: its next `publish` detaches the log.
        for sub in subs:
            sub.end()
