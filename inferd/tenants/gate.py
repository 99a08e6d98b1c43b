"""One request's way past the tenants: `identify` the key it presents (401),
admit it (403, 429), and `settle` when it ends (the reservation becomes what
was used, the lease is given back, the ledger gets a row).

Admission is two steps: `enter` at the door of a generating route (lease,
rpm; before the body is read) and `admit` where model and prompt are known
(scope, tokens). A `Ticket` is what a request carries between these steps.
Whatever produces output adds a meter to it (a callable giving prompt,
completion and cached tokens so far), so settling reads the counts however
the request ended: finished, stopped, cancelled or left by its client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from inferd.tenants.keyring import KeyRing
from inferd.tenants.keys import ApiKey
from inferd.tenants.ledger import Ledger
from inferd.tenants.limiter import Limiter, Reservation, utc_day
from inferd.tenants.refused import Refused

log = logging.getLogger(__name__)

Meter = Callable[[], tuple[int, int, int]]  # prompt, completion, cached tokens so far
HOW_TO_SEND = "send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
FLUSH_SECONDS = 1.0


@dataclass
class Ticket:
    key: ApiKey
    model: str = ""
    reservation: Reservation | None = None
    meters: list[Meter] = field(default_factory=list)
    failed: bool = False  # ended by an error after its status line went out
    generating: bool = False  # on a generating path: admitted against the key's limits
    settled: bool = False

    @property
    def admitted(self) -> bool:
        return self.reservation is not None

    @property
    def headers(self) -> dict[str, str]:
        return self.reservation.headers if self.reservation is not None else {}

    def usage(self) -> tuple[int, int, int]:
        totals = [0, 0, 0]
        for meter in self.meters:
            for i, n in enumerate(meter()):
                totals[i] += n
        return totals[0], totals[1], totals[2]


class Tenants:
    def __init__(self, ring: KeyRing, limiter: Limiter | None = None, ledger: Ledger | None = None, *,
                 isolate_cache: bool = False, clock: Callable[[], float] = time.time):
        self.ring = ring
        self.limiter = limiter or Limiter(clock=clock)
        self.ledger = ledger or Ledger(ring)
        self.isolate_cache = isolate_cache
        self.clock = clock
        self._flush_due = False
        self._counted: set[tuple[str, str]] = set()  # (key, day) whose earlier usage is in the daily counter
        self._flushing: asyncio.Task | None = None
        self.watch = None  # a StoreWatch, stopped on close
        self._closed = False

    @property
    def enabled(self) -> bool:
        """Keys exist, so every request must bring one."""
        return len(self.ring) > 0

    def identify(self, presented: list[bytes]) -> ApiKey:
        if not presented:
            raise Refused(401, f"this server needs an API key; {HOW_TO_SEND}", code="invalid_api_key")
        now = self.clock()
        for secret in presented:
            key = self.ring.find(secret)
            if key is None:
                continue
            if key.disabled:
                raise Refused(401, f"API key {key.name!r} is disabled; ask an admin to enable it", code="key_disabled")
            if key.expired(now):
                when = datetime.fromtimestamp(key.expires_at, timezone.utc).isoformat(timespec="seconds")
                raise Refused(401, f"API key {key.name!r} expired at {when}; ask an admin for a new one",
                              code="key_expired")
            self.ring.used(key, now)
            return key
        raise Refused(401, f"invalid API key; {HOW_TO_SEND}", code="invalid_api_key")

    async def enter(self, ticket: Ticket) -> None:
        """At the door of a generating route: a lease and a request (429 over max_concurrent or rpm)."""
        if ticket.reservation is None:
            ticket.reservation = await self.limiter.enter(ticket.key)

    async def admit(self, ticket: Ticket, model: str, tokens: int) -> None:
        """Where the prompt is known: `model` in scope (403, before anything is charged), `tokens`
        reserved (429); with the lease and the request too when the door did not take them."""
        key = ticket.key
        ticket.model = model
        try:
            if not key.may_use(model):
                if ticket.reservation is not None:  # the door counted it before the model was known
                    await self.limiter.give_back_request(ticket.reservation)
                raise Refused(403, f"API key {key.name!r} may not use model {model!r}; it may use "
                                   f"{', '.join(map(repr, key.scopes))}", code="model_not_allowed")
            if key.limits.daily_tokens and self.limiter.in_memory:
                await self._count_earlier_today(key)
            if ticket.reservation is None:
                ticket.reservation = await self.limiter.acquire(key, tokens)  # one step: lease, rpm and tokens
            else:
                await self.limiter.reserve(ticket.reservation, key, tokens)
        except Refused as refused:
            if ticket.reservation is None:  # nothing held, so no settling will ledger it
                self.refused(ticket, refused)
            else:
                self._count_refusal(ticket, refused)
            raise

    async def _count_earlier_today(self, key) -> None:
        """Counters in memory start at zero with the process: a key's first request of the day here
        adds what the ledger holds for today, so a restart does not renew a daily allowance."""
        day = utc_day(self.clock())
        if (key.name, day) in self._counted:
            return
        self._counted.add((key.name, day))
        rows = await self._off_loop_if_stored(self.ledger.usage, key.name, None, day, day)
        used = sum(r.prompt_tokens + r.completion_tokens for r in rows)
        if used:
            await self.limiter.count_daily(key, day, used)

    async def settle(self, ticket: Ticket, status: int) -> None:
        if ticket.settled:
            return
        ticket.settled = True
        prompt, completion, cached = ticket.usage()
        if ticket.reservation is not None:
            try:
                await self.limiter.settle(ticket.reservation, prompt + completion)
            except Exception:  # a counter store gone away must not fail the answer already sent
                log.exception("settling %s's reservation failed", ticket.key.name)
        if ticket.admitted:
            self.ledger.record(ticket.key.name, ticket.model, utc_day(self.clock()), prompt, completion, cached,
                               status >= 400 or ticket.failed)
        self._maybe_flush()

    def refused(self, ticket: Ticket, refused: Refused) -> None:
        """A request turned away holding nothing (429 at `enter`): one error in the ledger."""
        self.ledger.record(ticket.key.name, ticket.model, utc_day(self.clock()), 0, 0, 0, True)
        self._count_refusal(ticket, refused)
        self._maybe_flush()

    def _count_refusal(self, ticket: Ticket, refused: Refused) -> None:
        if self.ledger.metrics is not None:
            self.ledger.metrics.refused.labels(ticket.key.name, refused.kind or str(refused.status)).inc()

    def cache_salt(self, key: ApiKey | None, salt: str | None) -> str | None:
        """With `--isolate-cache per-key`, each key's prompts share cached blocks only with its own."""
        if not self.isolate_cache or key is None:
            return salt
        return f"key:{key.name}" + (f"/{salt}" if salt else "")

    def _maybe_flush(self) -> None:
        """Write what was recorded within FLUSH_SECONDS, in one batch (on a worker thread when there is a store)."""
        if self._flush_due:
            return
        self._flush_due = True

        def start() -> None:
            self._flush_due = False
            self._flushing = asyncio.ensure_future(self._off_loop_if_stored(self._flush_logged))

        asyncio.get_running_loop().call_later(FLUSH_SECONDS, start)

    async def _off_loop_if_stored(self, work, *args):
        """`work` on a worker thread when it reads or writes the key store; at once when the ledger is
        this process's memory (a thread hop costs more than the work, and its thread competes for the GIL)."""
        if self.ledger.store is None:
            return work(*args)
        return await asyncio.to_thread(work, *args)

    def _flush_logged(self) -> None:
        try:
            self.ledger.flush()
        except Exception:
            log.exception("writing usage to the key store failed; it is kept for the next try")

    def stop_watching(self) -> None:
        """Stop taking offline edits of the key store (the app serving these keys has shut down)."""
        if self.watch is not None:
            self.watch.stop()

    def close(self) -> None:
        """Write what is left (blocking). Once: a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.stop_watching()
        self._flush_logged()
        if self.ring.store is not None:
            self.ring.store.close()
