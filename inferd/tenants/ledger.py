"""Usage per key, model and UTC day: requests, prompt, completion and cached
tokens, errors. Recorded in memory as requests end and written to the store
in batches (`flush`, on a worker thread), with the keys' last-used times;
without a store the ledger is this process's memory."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace

from inferd.tenants.keyring import KeyRing
from inferd.tenants.store import USAGE_COUNTS, UsageRow


class Ledger:
    def __init__(self, ring: KeyRing, metrics=None):
        self.ring = ring
        self.store = ring.store
        self.metrics = metrics  # tenants.metrics.KeyMetrics
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str, str], UsageRow] = {}
        self._kept: dict[tuple[str, str, str], UsageRow] = {}  # without a store: everything

    def record(self, key: str, model: str, day: str, prompt: int, completion: int, cached: int, error: bool) -> None:
        add = UsageRow(key, model, day, 1, prompt, completion, cached, int(error))
        with self._lock:
            for table in (self._pending,) if self.store is not None else (self._pending, self._kept):
                table[(key, model, day)] = _sum(table.get((key, model, day)), add)
        if self.metrics is not None:
            self.metrics.record(add)

    def flush(self) -> None:
        """Write what was recorded since the last flush (blocking: call it on a worker thread)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        last_used = self.ring.take_last_used()
        if self.store is None:
            return
        try:
            if pending:
                self.store.add_usage(pending.values())
            if last_used:
                self.store.touch(last_used)
        except Exception:
            with self._lock:  # kept for the next flush, not lost
                for k, row in pending.items():
                    self._pending[k] = _sum(self._pending.get(k), row)
            raise

    def usage(self, key: str | None = None, model: str | None = None, since: str | None = None,
              until: str | None = None) -> list[UsageRow]:
        """Rows matching the filters (blocking: flushes first)."""
        if self.store is not None:
            self.flush()
            return self.store.usage(key, model, since, until)
        with self._lock:
            rows = list(self._kept.values())
        return sorted((r for r in rows if (key is None or r.key == key) and (model is None or r.model == model)
                       and (since is None or r.day >= since) and (until is None or r.day <= until)),
                      key=lambda r: (r.day, r.key, r.model))

    def totals_by_key(self, day: str) -> dict[str, dict]:
        totals: dict[str, dict] = defaultdict(lambda: dict.fromkeys(USAGE_COUNTS, 0))
        for row in self.usage(since=day, until=day):
            for c in USAGE_COUNTS:
                totals[row.key][c] += getattr(row, c)
        return dict(totals)


def _sum(a: UsageRow | None, b: UsageRow) -> UsageRow:
    if a is None:
        return b
    return replace(a, **{c: getattr(a, c) + getattr(b, c) for c in USAGE_COUNTS})
