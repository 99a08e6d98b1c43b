"""The limiter on Redis counters: each step is one Lua script, all or nothing
(the door's, the tokens', both at once for the router, and settling);
a reservation settles to what was used in the window it came from (and not
in a later one); leases come back; two limiters on one Redis share a limit."""

from __future__ import annotations

import asyncio

import pytest

from inferd.tenants.keyring import KeyRing
from inferd.tenants.limiter import Limiter, utc_day
from inferd.tenants.refused import Refused
from redis_server import RedisServer, redis_or_skip


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), binary=redis_or_skip())
    with server:
        yield server


_names = (f"r{i}" for i in range(1000))


def key_with(**limits):
    key, _ = KeyRing().add(next(_names), limits)
    return key


def run(coro):
    return asyncio.run(coro)


class Counted:
    """Counts the scripts Redis itself has run (its command statistics): one a round trip."""

    def __init__(self, limiter: Limiter):
        self.connection = limiter.counters.storage.bridge.get_connection()
        self.start = 0

    async def scripts(self) -> int:
        stats = await self.connection.info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))

    async def calls(self) -> int:
        return await self.scripts() - self.start

    @classmethod
    async def on(cls, limiter: Limiter) -> Counted:
        counted = cls(limiter)
        counted.start = await counted.scripts()
        return counted


def test_each_step_is_one_round_trip_and_refusals_cost_nothing(redis):
    key = key_with(rpm=3, tpm=100, daily_tokens=1000, max_concurrent=5)

    async def go():
        limiter = Limiter(redis.url)
        await limiter.settle(await limiter.acquire(key, 1), 1)  # scripts loaded
        counted = await Counted.on(limiter)
        held = await limiter.enter(key)
        await limiter.reserve(held, key, 80)
        await limiter.settle(held, 10)
        assert await counted.calls() == 3
        assert held.headers["x-ratelimit-remaining-requests"] == "1"
        assert held.headers["x-ratelimit-remaining-tokens"] == "19"  # 1 + 80 of 100
        one_step = await limiter.acquire(key, 5)  # the router's: lease, request and tokens at once
        assert await counted.calls() == 4 and one_step.headers["x-ratelimit-remaining-requests"] == "0"
        await limiter.settle(one_step, 5)
        with pytest.raises(Refused) as e:
            await limiter.enter(key)
        assert e.value.kind == "requests" and 1 <= int(e.value.headers["Retry-After"]) <= 60
        assert await limiter.in_flight(key) == 0  # the refused step took no lease either
        tpm = f"LIMITER/{key.name}/tokens/100/1/minute"
        daily = f"LIMITER/{key.name}/daily/{utc_day(limiter.clock())}/1000/1/day"
        assert await limiter.counters.get(tpm) == 16 and await limiter.counters.get(daily) == 16

    run(go())


def test_tokens_settle_in_their_own_window_only(redis):
    key = key_with(tpm=100)

    async def go():
        limiter = Limiter(redis.url)
        held = await limiter.acquire(key, 90)
        with pytest.raises(Refused) as e:
            await limiter.acquire(key, 20)
        assert e.value.kind == "tokens"
        tpm = f"LIMITER/{key.name}/tokens/100/1/minute"
        connection = limiter.counters.storage.bridge.get_connection()
        await connection.delete(limiter.counters.storage.bridge.prefixed_key(tpm))  # the minute ended
        await asyncio.sleep(0.01)  # a window is told by its end to the millisecond; real ones end a minute apart
        later = await limiter.acquire(key, 30)
        await limiter.settle(held, 5)  # the old window's refund does not land in the new one
        assert await limiter.counters.get(tpm) == 30
        await limiter.settle(later, 40)  # an overrun is taken
        assert await limiter.counters.get(tpm) == 40

    run(go())


def test_two_limiters_on_one_redis_share_leases_and_rpm(redis):
    key = key_with(rpm=3, max_concurrent=2)

    async def go():
        a, b = Limiter(redis.url), Limiter(redis.url)
        first, second = await a.enter(key), await b.enter(key)
        with pytest.raises(Refused) as e:
            await a.enter(key)
        assert e.value.kind == "concurrency"
        await a.settle(first, 0)
        await a.settle(first, 0)  # twice is once
        third = await b.enter(key)
        await b.settle(second, 0)
        with pytest.raises(Refused) as e:  # three requests this minute; the refused one did not count
            await a.enter(key)
        assert e.value.kind == "requests"
        await b.settle(third, 0)
        assert await a.in_flight(key) == 0
        bridge = a.counters.storage.bridge  # back at zero, the counter is dropped: the next lease gets a fresh expiry
        assert not await bridge.get_connection().exists(bridge.prefixed_key(f"inferd/concurrent/{key.name}"))

    run(go())


def test_scripts_survive_a_flushed_redis_a_closed_connection_and_a_cancelled_step(redis):
    key = key_with(rpm=100, max_concurrent=5)

    async def go():
        limiter = Limiter(redis.url)
        await limiter.settle(await limiter.enter(key), 0)
        admin = limiter.counters.storage.bridge.get_connection()
        await admin.script_flush()  # as after a restart: Redis no longer holds the scripts
        held = await limiter.enter(key)
        assert held.headers["x-ratelimit-remaining-requests"] == "98"
        await admin.client_kill_filter(_type="normal", skipme=True)  # the server drops the idle connections
        await limiter.settle(held, 0)
        assert await limiter.in_flight(key) == 0

        rpm = f"LIMITER/{key.name}/requests/100/1/minute"
        for turns in range(4):  # cancelled before its step is written, while its reply is read, or after
            started = asyncio.ensure_future(limiter.enter(key))
            for _ in range(turns):
                await asyncio.sleep(0)
            started.cancel()
            try:
                await limiter.settle(await started, 0)  # redis-py may still finish a reply it was reading
            except asyncio.CancelledError:
                pass
            counted = await Counted.on(limiter)
            after = await limiter.enter(key)  # its own reply, never one meant for the cancelled step
            assert await counted.calls() == 1
            assert int(after.headers["x-ratelimit-remaining-requests"]) == 100 - await limiter.counters.get(rpm)
            await limiter.settle(after, 0)
        assert await limiter.in_flight(key) == 0

    run(go())
