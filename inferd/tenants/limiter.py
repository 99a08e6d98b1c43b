"""A key's limits on `limits` counters: requests and tokens per minute (fixed
one-minute windows), tokens per UTC day, and requests in flight. Counters live
in memory, or in Redis (`--rate-limit-storage redis://HOST:PORT`) so that
router replicas and workers share one limit (`counters.py`: one round trip
per step).

Admission comes in two steps. At the door (`enter`), before the body is
read: a concurrency lease and one request against rpm. Where the prompt is
known (`reserve`): prompt + the request's budget against tpm and today's
tokens. Where the door has no reason to come first (the router, which reads
every body it forwards anyway), both are one step (`acquire`). Each step
takes all it needs or nothing, so a refusal costs its key nothing more. The
reservation settles to what was used when the request ends, in the window it
was taken from, in one more step with the lease.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from limits import RateLimitItemPerDay, RateLimitItemPerMinute

from inferd.tenants.counters import Short, Taken, Want, open_counters
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


@dataclass
class Reservation:
    """What an admitted request holds until it ends."""

    tokens: int = 0
    reserved: bool = False  # tokens reserved (once per request)
    request: Taken | None = None  # the rpm window's hit
    taken: list[Taken] = field(default_factory=list)  # token windows, to settle
    lease: Taken | None = None  # the concurrency counter to give back
    headers: dict[str, str] = field(default_factory=dict)  # x-ratelimit-*


class Limiter:
    def __init__(self, storage_uri: str = "memory://", clock=time.time):
        self.counters = open_counters(storage_uri)
        self.in_memory = self.counters.in_memory  # counters die with the process
        self.clock = clock

    async def acquire(self, key: ApiKey, tokens: int) -> Reservation:
        """`enter` and `reserve` in one step: everything a request needs, or `Refused` and nothing taken."""
        now = self.clock()
        held = Reservation()
        await self._take(held, key, [*self._door(key), *self._tokens(key, tokens, now)], tokens, now)
        held.reserved, held.tokens = True, tokens
        return held

    async def enter(self, key: ApiKey) -> Reservation:
        """A concurrency lease and one request against rpm, or `Refused` (429) and nothing taken.
        Checked at the door, before the body is read."""
        held = Reservation()
        await self._take(held, key, self._door(key), 0, self.clock())
        return held

    async def reserve(self, held: Reservation, key: ApiKey, tokens: int) -> None:
        """Reserve `tokens` (prompt + budget) against tpm and today's tokens, or
        `Refused` (429) with no tokens taken. Once per request."""
        if held.reserved:
            return
        now = self.clock()
        await self._take(held, key, self._tokens(key, tokens, now), tokens, now)
        held.reserved, held.tokens = True, tokens

    def _door(self, key: ApiKey) -> list[tuple[str, Want]]:
        lim, wants = key.limits, []
        if lim.max_concurrent:
            wants.append(("concurrency", Want(f"inferd/concurrent/{key.name}", LEASE_EXPIRY, 1, lim.max_concurrent,
                                              lease=True)))
        if lim.rpm:
            item = RateLimitItemPerMinute(lim.rpm)
            wants.append(("requests", Want(item.key_for(key.name, "requests"), item.get_expiry(), 1, lim.rpm)))
        return wants

    def _tokens(self, key: ApiKey, tokens: int, now: float) -> list[tuple[str, Want]]:
        """The token windows `tokens` would take from; `Refused` at once if no window could ever hold them."""
        lim, wants = key.limits, []
        if lim.tpm and tokens > lim.tpm:
            raise Refused(429, f"this request needs {tokens} tokens (prompt + max tokens), more than this "
                               f"key's {lim.tpm} tokens per minute: lower max_tokens or shorten the prompt",
                          code="rate_limit_exceeded", kind="tokens")
        if lim.daily_tokens and tokens > lim.daily_tokens:
            raise Refused(429, f"this request needs {tokens} tokens, more than this key's daily allowance "
                               f"of {lim.daily_tokens}: lower max_tokens", code="rate_limit_exceeded",
                          kind="daily_tokens")
        if lim.tpm:
            item = RateLimitItemPerMinute(lim.tpm)
            wants.append(("tokens", Want(item.key_for(key.name, "tokens"), item.get_expiry(), tokens, lim.tpm)))
        if lim.daily_tokens:
            item = RateLimitItemPerDay(lim.daily_tokens)
            wants.append(("daily_tokens", Want(item.key_for(key.name, "daily", utc_day(now)), item.get_expiry(),
                                               tokens, lim.daily_tokens)))
        return wants

    async def _take(self, held: Reservation, key: ApiKey, wants: list[tuple[str, Want]], tokens: int,
                    now: float) -> None:
        """Take every want into `held` in one step, or raise the first one's refusal."""
        taken = await self.counters.take([w for _, w in wants])
        if isinstance(taken, Short):
            raise self._refusal(wants[taken.index][0], key, tokens, taken.wait, now)
        lim = key.limits
        for (kind, _), t in zip(wants, taken):
            if kind == "concurrency":
                held.lease = t
            elif kind == "requests":
                held.request = t
                held.headers.update(self._headers("requests", lim.rpm, t))
            else:
                held.taken.append(t)
                if kind == "tokens":
                    held.headers.update(self._headers("tokens", lim.tpm, t))

    def _refusal(self, kind: str, key: ApiKey, tokens: int, wait: float, now: float) -> Refused:
        lim = key.limits
        if kind == "concurrency":
            return Refused(429, f"this key already has {lim.max_concurrent} requests in flight (max_concurrent); "
                                "wait for one to finish", code="rate_limit_exceeded", kind="concurrency",
                           headers={"Retry-After": "1"})
        if kind == "requests":
            return Refused(429, f"rate limit of {lim.rpm} requests per minute reached for this key; "
                                f"retry in {duration(wait)}", code="rate_limit_exceeded", kind="requests",
                           headers=self._exhausted("requests", lim.rpm, wait))
        if kind == "tokens":
            return Refused(429, f"rate limit of {lim.tpm} tokens per minute reached for this key "
                                f"(this request reserves {tokens}); retry in {duration(wait)}",
                           code="rate_limit_exceeded", kind="tokens", headers=self._exhausted("tokens", lim.tpm, wait))
        return Refused(429, f"this key has used its {lim.daily_tokens} tokens for today (UTC); "
                            "it may continue at 00:00 UTC", code="rate_limit_exceeded", kind="daily_tokens",
                       headers={"Retry-After": str(math.ceil(seconds_to_midnight(now)))})

    async def settle(self, held: Reservation, used: int, *, give_back_request: bool = False) -> None:
        """Give back the lease and the part of the reservation not used (or take
        the overrun); the request stays counted unless `give_back_request`. Safe to call again."""
        back: list[tuple[Taken, int]] = [(t, t.amount - used) for t in held.taken]
        if held.lease is not None:
            back.append((held.lease, 1))
        if give_back_request and held.request is not None:
            back.append((held.request, 1))
        held.lease, held.request, held.taken = None, None, []
        await self.counters.give_back(back)

    async def give_back_request(self, held: Reservation) -> None:
        """The request no longer counts against rpm (refused for a reason of its own, such as scope)."""
        if held.request is not None:
            request, held.request = held.request, None
            await self.counters.give_back([(request, 1)])

    async def count_daily(self, key: ApiKey, day: str, tokens: int) -> None:
        """Add tokens used earlier today (before a restart) to the key's daily counter."""
        item = RateLimitItemPerDay(key.limits.daily_tokens)
        await self.counters.add(item.key_for(key.name, "daily", day), item.get_expiry(), tokens)

    async def in_flight(self, key: ApiKey) -> int:
        return await self.counters.get(f"inferd/concurrent/{key.name}")

    def _headers(self, kind: str, limit: int, taken: Taken) -> dict[str, str]:
        return {f"x-ratelimit-limit-{kind}": str(limit),
                f"x-ratelimit-remaining-{kind}": str(max(0, limit - taken.count)),
                f"x-ratelimit-reset-{kind}": duration(max(0.0, taken.reset - self.clock()))}

    def _exhausted(self, kind: str, limit: int, wait: float) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(wait))), f"x-ratelimit-limit-{kind}": str(limit),
                f"x-ratelimit-remaining-{kind}": "0", f"x-ratelimit-reset-{kind}": duration(wait)}
