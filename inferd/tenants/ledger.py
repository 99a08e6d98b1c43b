"""Usage per key, model and UTC day: requests, prompt, completion and cached
tokens, errors. Recorded in memory as requests end and written to the store
in batches (`flush`, on a worker thread), with the keys' last-used times;
without a store the ledger is this process's memory."""

from __future__ import annotations

import threading
from collections import defaultdict

from inferd.tenants.keyring import KeyRing
from inferd.tenants.store import USAGE_COUNTS, UsageRow


class Ledger:
    def __init__(self, ring: KeyRing, metrics=None):
        self.ring = ring
        self.store = ring.store
        self.metrics = metrics  # tenants.metrics.KeyMetrics
        self._lock = threading.Lock()
        # (key, model, day) -> counts in USAGE_COUNTS order; plain lists, as this runs once per request
        self._pending: dict[tuple[str, str, str], list[int]] = {}
        self._kept: dict[tuple[str, str, str], list[int]] = {}  # without a store: everything

    def record(self, key: str, model: str, day: str, prompt: int, completion: int, cached: int, error: bool,
               requests: int = 1) -> None:
        """`requests`: 0 for tokens of a request counted already (a background response's run)."""
        add = (requests, prompt, completion, cached, int(error))
        where = (key, model, day)
        with self._lock:
            for table in (self._pending,) if self.store is not None else (self._pending, self._kept):
                counts = table.get(where)
                if counts is None:
                    table[where] = list(add)
                else:
                    for i, n in enumerate(add):
                        counts[i] += n
        if self.metrics is not None:
            self.metrics.record(UsageRow(*where, *add))

    def flush(self) -> None:
        """Write what was recorded since the last flush (blocking: call it on a worker thread)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        last_used = self.ring.take_last_used()
        if self.store is None:
            return
        try:
            if pending:
                self.store.add_usage(UsageRow(*where, *counts) for where, counts in pending.items())
            if last_used:
                self.store.touch(last_used)
        except Exception:
            with self._lock:  # kept for the next flush, not lost
                for where, counts in pending.items():
                    mine = self._pending.setdefault(where, [0] * len(counts))
                    for i, n in enumerate(counts):
                        mine[i] += n
            raise

    def usage(self, key: str | None = None, model: str | None = None, since: str | None = None,
              until: str | None = None) -> list[UsageRow]:
        """Rows matching the filters (blocking: flushes first)."""
        if self.store is not None:
            self.flush()
            return self.store.usage(key, model, since, until)
        with self._lock:
            rows = [UsageRow(*where, *counts) for where, counts in self._kept.items()]
        return sorted((r for r in rows if (key is None or r.key == key) and (model is None or r.model == model)
                       and (since is None or r.day >= since) and (until is None or r.day <= until)),
                      key=lambda r: (r.day, r.key, r.model))

    def totals_by_key(self, day: str) -> dict[str, dict]:
        totals: dict[str, dict] = defaultdict(lambda: dict.fromkeys(USAGE_COUNTS, 0))
        for row in self.usage(since=day, until=day):
            for c in USAGE_COUNTS:
                totals[row.key][c] += getattr(row, c)
        return dict(totals)
