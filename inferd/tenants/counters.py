"""The counters a `Limiter` takes from: fixed windows and leases, each step
taking all it asks for or nothing.

In memory, a step is a few dict operations (`MemoryCounters`). In Redis, a
step is one round trip: a Lua script (sent by EVALSHA) checks every counter
of the step against its cap and only then adds to all of them,
so replicas sharing the counters never see half a step, and giving back
(a settled reservation, a lease) is one more script (`redis_counters.py`). A window is told apart
from the next one of the same key by its end (PEXPIRETIME, Redis >= 7.0):
what is given back goes only to the window it was taken from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from limits.storage import storage_from_string

if TYPE_CHECKING:
    from inferd.tenants.redis_counters import RedisCounters

SWEEP_SECONDS = 60.0  # how often ended windows of keys gone quiet are dropped from memory


@dataclass(frozen=True)
class Want:
    """`amount` from the counter `key` (a window of `expiry` seconds from its first take), refused
    above `cap` (0: no cap). A lease is given back whatever its window, never below zero."""

    key: str
    expiry: int
    amount: int
    cap: int = 0
    lease: bool = False


@dataclass
class Taken:
    key: str
    expiry: int
    amount: int
    count: int  # the counter just after taking
    reset: float  # the window's end (epoch seconds)
    window: float | int  # what identifies the window to give back to (the storage's own expiry)
    lease: bool = False


@dataclass(frozen=True)
class Short:
    """Refused: `wants[index]` would pass its cap; its window ends in `wait` seconds."""

    index: int
    wait: float


def open_counters(uri: str) -> MemoryCounters | RedisCounters:
    """memory:// or redis://HOST:PORT[/DB] (rediss:// for TLS)."""
    if uri.startswith(("redis://", "rediss://")):
        from inferd.tenants.redis_counters import RedisCounters  # redis-py's import is 0.1 s a start that uses none

        return RedisCounters(storage_from_string(f"async+{uri}", implementation="redispy"))
    if uri in ("memory", "memory://"):
        return MemoryCounters()
    raise ValueError(f"--rate-limit-storage {uri!r}: use memory:// or redis://HOST:PORT")


class MemoryCounters:
    """Fixed windows in this process's memory: each counter is its count and its window's end. An
    ended window reads as zero and is dropped when next touched, and a sweep at most every
    SWEEP_SECONDS drops those of keys gone quiet. Every step is a few dict operations, whatever the
    number of keys: the `limits` library's own async memory storage schedules a scan of every
    counter after each increment, which a server's event loop runs between requests (with 1,000
    keys, ~0.3 ms a request; `benchmarks/admission.py`)."""

    in_memory = True

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._counters: dict[str, list] = {}  # key -> [count, window end (epoch seconds)]
        self._next_sweep = clock() + SWEEP_SECONDS

    def _current(self, key: str, now: float) -> list | None:
        counter = self._counters.get(key)
        if counter is not None and counter[1] <= now:
            del self._counters[key]
            return None
        return counter

    def _add(self, key: str, expiry: int, amount: int, now: float) -> list:
        counter = self._current(key, now)
        if counter is None:
            counter = self._counters[key] = [0, now + expiry]  # a new window starts with its first take
        counter[0] += amount
        return counter

    def _sweep(self, now: float) -> None:
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_SECONDS
            for key in [k for k, (_, end) in self._counters.items() if end <= now]:
                del self._counters[key]

    async def take(self, wants: list[Want]) -> list[Taken] | Short:
        now = self.clock()
        self._sweep(now)
        for i, want in enumerate(wants):  # every cap first: a refused step takes nothing
            counter = self._current(want.key, now)
            if want.cap and (counter[0] if counter else 0) + want.amount > want.cap:
                return Short(i, max(0.0, counter[1] - now) if counter else float(want.expiry))
        taken = []
        for want in wants:
            count, end = self._add(want.key, want.expiry, want.amount, now)
            taken.append(Taken(want.key, want.expiry, want.amount, count, end, end, want.lease))
        return taken

    async def give_back(self, items: list[tuple[Taken, int]]) -> None:
        """`amount` back to each window it was taken from (negative: take more), if that window is current;
        a lease whatever its window, never below zero (back at zero it is dropped, as in Redis)."""
        now = self.clock()
        for t, amount in items:
            counter = self._current(t.key, now)
            if not amount or counter is None:
                continue
            if t.lease:
                if counter[0] > 0:
                    counter[0] -= amount
                    if counter[0] <= 0:
                        del self._counters[t.key]
            elif counter[1] == t.window:
                counter[0] -= amount

    async def add(self, key: str, expiry: int, amount: int) -> None:
        self._add(key, expiry, amount, self.clock())

    async def get(self, key: str) -> int:
        counter = self._current(key, self.clock())
        return counter[0] if counter is not None else 0
