"""The counters of `counters.py` in Redis: one Lua script per step, so
replicas sharing the counters never see half a step."""

from __future__ import annotations

from inferd.tenants.counters import Short, Taken, Want
from inferd.tenants.redis_scripts import Script, ScriptRunner

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
