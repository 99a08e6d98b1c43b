"""The counters a `Limiter` takes from: fixed windows and leases, each step
taking all it asks for or nothing.

In memory, a step is a few dict operations (`MemoryCounters`). In Redis, a
step is one round trip: a Lua script (sent by EVALSHA) checks every counter
of the step against its cap and only then adds to all of them,
so replicas sharing the counters never see half a step, and giving back
(a settled reservation, a lease) is one more script (`redis_scripts.py`). A window is told apart
from the next one of the same key by its end (PEXPIRETIME, Redis >= 7.0):
what is given back goes only to the window it was taken from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from limits.storage import storage_from_string

from inferd.tenants.redis_scripts import Script, ScriptRunner

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


# ARGV: three per key: amount, cap (0: none), expiry seconds (set when the counter is new).
# Returns {0, count1, end1, count2, end2, ...} (ends in epoch ms), or {i, pttl} when key i would pass its cap.
_TAKE = Script("""
for i = 1, #KEYS do
  local cap = tonumber(ARGV[3*i-1])
  if cap > 0 and tonumber(redis.call('GET', KEYS[i]) or '0') + tonumber(ARGV[3*i-2]) > cap then
    return {i, redis.call('PTTL', KEYS[i])}
  end
end
local out = {0}
for i = 1, #KEYS do
  local count = redis.call('INCRBY', KEYS[i], ARGV[3*i-2])
  if redis.call('TTL', KEYS[i]) < 0 then
    redis.call('EXPIRE', KEYS[i], ARGV[3*i])
  end
  out[2*i] = count
  out[2*i+1] = redis.call('PEXPIRETIME', KEYS[i])
end
return out
""")

# ARGV: two per key: amount to give back (negative: take more), the window's end in ms (0: a lease).
_GIVE_BACK = Script("""
for i = 1, #KEYS do
  local window = tonumber(ARGV[2*i])
  if window == 0 then
    -- a lease counter back at zero is dropped, so the next take starts it a fresh expiry: only one that
    -- never comes back to zero (leases a crashed replica kept) lives out its expiry
    if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 and redis.call('DECRBY', KEYS[i], ARGV[2*i-1]) <= 0 then
      redis.call('DEL', KEYS[i])
    end
  elseif redis.call('PEXPIRETIME', KEYS[i]) == window then
    redis.call('DECRBY', KEYS[i], ARGV[2*i-1])
  end
end
return 0
""")


class RedisCounters:
    in_memory = False

    def __init__(self, storage):
        self.storage = storage  # `limits`' Redis storage: its connection and key prefix, shared with `add` and `get`
        self.scripts = ScriptRunner(storage.bridge.get_connection().connection_pool)

    async def take(self, wants: list[Want]) -> list[Taken] | Short:
        if not wants:
            return []
        keys = [self.storage.bridge.prefixed_key(w.key) for w in wants]
        args = [a for w in wants for a in (w.amount, w.cap, w.expiry)]
        out = await self.scripts.run(_TAKE, keys, args)
        if out[0]:
            return Short(out[0] - 1, max(0, out[1]) / 1000)
        return [Taken(w.key, w.expiry, w.amount, out[2 * i + 1], out[2 * i + 2] / 1000,
                      0 if w.lease else out[2 * i + 2], w.lease)
                for i, w in enumerate(wants)]

    async def give_back(self, items: list[tuple[Taken, int]]) -> None:
        items = [(t, amount) for t, amount in items if amount]
        if items:
            await self.scripts.run(_GIVE_BACK, [self.storage.bridge.prefixed_key(t.key) for t, _ in items],
                                   [a for t, amount in items for a in (amount, t.window)])

    async def add(self, key: str, expiry: int, amount: int) -> None:
        await self.storage.incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return await self.storage.get(key)
