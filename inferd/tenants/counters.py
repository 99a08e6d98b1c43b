"""The counters a `Limiter` takes from: fixed windows and leases, each step
taking all it asks for or nothing.

In memory, a step is a few calls on the `limits` library's memory storage.
In Redis, a step is one round trip: a Lua script (sent by EVALSHA) checks
every counter of the step against its cap and only then adds to all of them,
so replicas sharing the counters never see half a step, and giving back
(a settled reservation, a lease) is one more script. A window is told apart
from the next one of the same key by its end (PEXPIRETIME, Redis >= 7.0):
what is given back goes only to the window it was taken from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from limits.storage import storage_from_string


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
        return MemoryCounters(storage_from_string("async+memory://"))
    raise ValueError(f"--rate-limit-storage {uri!r}: use memory:// or redis://HOST:PORT")


class MemoryCounters:
    in_memory = True

    def __init__(self, storage):
        self.storage = storage

    async def take(self, wants: list[Want]) -> list[Taken] | Short:
        taken: list[Taken] = []
        for i, want in enumerate(wants):
            count = await self.storage.incr(want.key, want.expiry, want.amount)
            if want.cap and count > want.cap:
                await self.storage.incr(want.key, want.expiry, -want.amount)  # a refusal costs nothing
                await self.give_back([(t, t.amount) for t in taken])
                return Short(i, max(0.0, await self.storage.get_expiry(want.key) - time.time()))
            end = await self.storage.get_expiry(want.key)
            taken.append(Taken(want.key, want.expiry, want.amount, count, end, end, want.lease))
        return taken

    async def give_back(self, items: list[tuple[Taken, int]]) -> None:
        """`amount` back to each window it was taken from (negative: take more), if that window is current."""
        for t, amount in items:
            if not amount:
                continue
            current = await self.storage.get(t.key) > 0 if t.lease else await self.storage.get_expiry(t.key) == t.window
            if current and await self.storage.incr(t.key, t.expiry, -amount) <= 0 and t.lease:
                await self.storage.clear(t.key)  # as in Redis: the next lease starts a fresh expiry

    async def add(self, key: str, expiry: int, amount: int) -> None:
        await self.storage.incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return await self.storage.get(key)


# ARGV: three per key: amount, cap (0: none), expiry seconds (set when the counter is new).
# Returns {0, count1, end1, count2, end2, ...} (ends in epoch ms), or {i, pttl} when key i would pass its cap.
_TAKE = """
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
"""

# ARGV: two per key: amount to give back (negative: take more), the window's end in ms (0: a lease).
_GIVE_BACK = """
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
"""


class RedisCounters:
    in_memory = False

    def __init__(self, storage):
        self.storage = storage  # `limits`' Redis storage: its connection and key prefix, shared with `add` and `get`
        client = storage.bridge.get_connection()
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)

    async def take(self, wants: list[Want]) -> list[Taken] | Short:
        if not wants:
            return []
        keys = [self.storage.bridge.prefixed_key(w.key) for w in wants]
        args = [a for w in wants for a in (w.amount, w.cap, w.expiry)]
        out = await self._take(keys, args)
        if out[0]:
            return Short(out[0] - 1, max(0, out[1]) / 1000)
        return [Taken(w.key, w.expiry, w.amount, out[2 * i + 1], out[2 * i + 2] / 1000,
                      0 if w.lease else out[2 * i + 2], w.lease)
                for i, w in enumerate(wants)]

    async def give_back(self, items: list[tuple[Taken, int]]) -> None:
        items = [(t, amount) for t, amount in items if amount]
        if items:
            await self._give_back([self.storage.bridge.prefixed_key(t.key) for t, _ in items],
                                  [a for t, amount in items for a in (amount, t.window)])

    async def add(self, key: str, expiry: int, amount: int) -> None:
        await self.storage.incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return await self.storage.get(key)
