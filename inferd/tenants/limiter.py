"""A key's limits on `limits` counters: requests and tokens per minute (fixed
one-minute windows), tokens per UTC day, and requests in flight. Counters live
in memory, or in Redis (`--rate-limit-storage redis://HOST:PORT`) so that
router replicas and workers share one limit.

Admission comes in two steps. At the door (`enter`), before the body is
read: a concurrency lease and one request against rpm. Where the prompt is
known (`reserve`): prompt + the request's budget against tpm and today's
tokens. Each step takes all it needs or nothing, so a refusal costs its key
nothing more. The reservation settles to what was used when the request
ends, in the window it was taken from.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from limits import RateLimitItemPerDay, RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.aio.strategies import FixedWindowRateLimiter

from inferd.tenants.keys import ApiKey
from inferd.tenants.refused import Refused

LEASE_EXPIRY = 24 * 3600  # a lease counter a crashed replica leaves behind is forgotten after this


def utc_day(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d")


def seconds_to_midnight(now: float) -> float:
    today = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return (today + timedelta(days=1)).timestamp() - now


def duration(seconds: float) -> str:
    """A wait as OpenAI's x-ratelimit-reset-* headers write it: 20ms, 1s, 6m0s."""
    if seconds < 1:
        return f"{max(0, int(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def open_storage(uri: str):
    """memory:// or redis://HOST:PORT[/DB] (rediss:// for TLS)."""
    if uri.startswith(("redis://", "rediss://")):
        return storage_from_string(f"async+{uri}", implementation="redispy")
    if uri in ("memory", "memory://"):
        return storage_from_string("async+memory://")
    raise ValueError(f"--rate-limit-storage {uri!r}: use memory:// or redis://HOST:PORT")


@dataclass
class _Taken:
    key: str  # the storage key
    expiry: int
    amount: int
    reset: float  # the window's end when taken: a refund applies only to the same window
    count: int = 0  # the window's count just after taking


@dataclass
class Reservation:
    """What an admitted request holds until it ends."""

    tokens: int = 0
    reserved: bool = False  # tokens reserved (once per request)
    request: _Taken | None = None  # the rpm window's hit
    taken: list[_Taken] = field(default_factory=list)  # token windows, to settle
    lease: str | None = None  # the concurrency counter to give back
    headers: dict[str, str] = field(default_factory=dict)  # x-ratelimit-*


class Limiter:
    def __init__(self, storage_uri: str = "memory://", clock=time.time):
        self.storage = open_storage(storage_uri)
        self.in_memory = not storage_uri.startswith(("redis://", "rediss://"))  # counters die with the process
        self.windows = FixedWindowRateLimiter(self.storage)
        self.clock = clock

    async def acquire(self, key: ApiKey, tokens: int) -> Reservation:
        """`enter` then `reserve`: everything a request needs, or `Refused` and nothing taken."""
        held = await self.enter(key)
        try:
            await self.reserve(held, key, tokens)
        except BaseException:
            await self.settle(held, 0, give_back_request=True)
            raise
        return held

    async def enter(self, key: ApiKey) -> Reservation:
        """A concurrency lease and one request against rpm, or `Refused` (429) and nothing taken.
        Checked at the door, before the body is read."""
        lim, name = key.limits, key.name
        held = Reservation()
        try:
            if lim.max_concurrent:
                lease = f"inferd/concurrent/{name}"
                if await self.storage.incr(lease, LEASE_EXPIRY, 1) > lim.max_concurrent:
                    await self.storage.incr(lease, LEASE_EXPIRY, -1)
                    raise Refused(429, f"this key already has {lim.max_concurrent} requests in flight "
                                       "(max_concurrent); wait for one to finish", code="rate_limit_exceeded",
                                  kind="concurrency", headers={"Retry-After": "1"})
                held.lease = lease
            if lim.rpm:
                item = RateLimitItemPerMinute(lim.rpm)
                taken = await self._take(item, 1, name, "requests")
                if taken is None:
                    wait = await self._wait(item, name, "requests")
                    raise Refused(429, f"rate limit of {lim.rpm} requests per minute reached for this key; "
                                       f"retry in {duration(wait)}", code="rate_limit_exceeded", kind="requests",
                                  headers=self._exhausted("requests", lim.rpm, wait))
                held.request = taken
                held.headers.update(self._headers("requests", lim.rpm, taken))
                held.headers["x-ratelimit-remaining-requests"] = str(max(0, lim.rpm - taken.count))
        except BaseException:
            await self.settle(held, 0)
            raise
        return held

    async def reserve(self, held: Reservation, key: ApiKey, tokens: int) -> None:
        """Reserve `tokens` (prompt + budget) against tpm and today's tokens, or
        `Refused` (429) with no tokens taken. Once per request."""
        if held.reserved:
            return
        lim, name, now = key.limits, key.name, self.clock()
        taken_here: list[_Taken] = []
        try:
            if lim.tpm:
                if tokens > lim.tpm:
                    raise Refused(429, f"this request needs {tokens} tokens (prompt + max tokens), more than this "
                                       f"key's {lim.tpm} tokens per minute: lower max_tokens or shorten the prompt",
                                  code="rate_limit_exceeded", kind="tokens")
                item = RateLimitItemPerMinute(lim.tpm)
                taken = await self._take(item, tokens, name, "tokens")
                if taken is None:
                    wait = await self._wait(item, name, "tokens")
                    raise Refused(429, f"rate limit of {lim.tpm} tokens per minute reached for this key "
                                       f"(this request reserves {tokens}); retry in {duration(wait)}",
                                  code="rate_limit_exceeded", kind="tokens",
                                  headers=self._exhausted("tokens", lim.tpm, wait))
                taken_here.append(taken)
                held.headers.update(self._headers("tokens", lim.tpm, taken))
                held.headers["x-ratelimit-remaining-tokens"] = str(max(0, lim.tpm - taken.count))
            if lim.daily_tokens:
                if tokens > lim.daily_tokens:
                    raise Refused(429, f"this request needs {tokens} tokens, more than this key's daily allowance "
                                       f"of {lim.daily_tokens}: lower max_tokens", code="rate_limit_exceeded",
                                  kind="daily_tokens")
                taken = await self._take(RateLimitItemPerDay(lim.daily_tokens), tokens, name, "daily", utc_day(now))
                if taken is None:
                    wait = seconds_to_midnight(now)
                    raise Refused(429, f"this key has used its {lim.daily_tokens} tokens for today (UTC); "
                                       "it may continue at 00:00 UTC", code="rate_limit_exceeded",
                                  kind="daily_tokens", headers={"Retry-After": str(math.ceil(wait))})
                taken_here.append(taken)
        except BaseException:
            for t in taken_here:
                await self._give_back(t, t.amount)
            raise
        held.reserved, held.tokens = True, tokens
        held.taken += taken_here

    async def settle(self, held: Reservation, used: int, *, give_back_request: bool = False) -> None:
        """Give back the lease and the part of the reservation not used (or take
        the overrun); the request stays counted unless `give_back_request`. Safe to call again."""
        if held.lease is not None:
            lease, held.lease = held.lease, None
            await self.storage.incr(lease, LEASE_EXPIRY, -1)
        if give_back_request and held.request is not None:
            await self._give_back(held.request, 1)
        held.request = None
        taken, held.taken = held.taken, []
        for t in taken:
            await self._give_back(t, t.amount - used)

    async def _give_back(self, t: _Taken, amount: int) -> None:
        """Return `amount` (negative: take more) to the window `t` was taken from, if it is still that window."""
        if amount and await self.storage.get_expiry(t.key) == t.reset:
            await self.storage.incr(t.key, t.expiry, -amount)

    async def count_daily(self, key: ApiKey, day: str, tokens: int) -> None:
        """Add tokens used earlier today (before a restart) to the key's daily counter."""
        item = RateLimitItemPerDay(key.limits.daily_tokens)
        await self.storage.incr(item.key_for(key.name, "daily", day), item.get_expiry(), tokens)

    async def in_flight(self, key: ApiKey) -> int:
        return await self.storage.get(f"inferd/concurrent/{key.name}")

    async def _take(self, item, cost: int, *identifiers: str) -> _Taken | None:
        """`cost` from a fixed window (the `limits` strategy's own key and expiry), or None and nothing taken."""
        storage_key, expiry = item.key_for(*identifiers), item.get_expiry()
        count = await self.storage.incr(storage_key, expiry, cost)
        if count > item.amount:
            await self.storage.incr(storage_key, expiry, -cost)  # a refusal costs nothing
            return None
        return _Taken(storage_key, expiry, cost, await self.storage.get_expiry(storage_key), count)

    async def _wait(self, item, *identifiers: str) -> float:
        stats = await self.windows.get_window_stats(item, *identifiers)
        return max(0.0, stats.reset_time - self.clock())

    def _headers(self, kind: str, limit: int, taken: _Taken) -> dict[str, str]:
        return {f"x-ratelimit-limit-{kind}": str(limit),
                f"x-ratelimit-reset-{kind}": duration(max(0.0, taken.reset - self.clock()))}

    def _exhausted(self, kind: str, limit: int, wait: float) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(wait))), f"x-ratelimit-limit-{kind}": str(limit),
                f"x-ratelimit-remaining-{kind}": "0", f"x-ratelimit-reset-{kind}": duration(wait)}
