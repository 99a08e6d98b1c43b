"""Putting tenants together the one way the server, the router and
`inferd keys` do: the key store in the data dir (when there is one), the
bootstrap keys beside it, counters in memory or Redis."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from inferd.tenants.gate import Tenants
from inferd.tenants.keyring import KeyRing
from inferd.tenants.ledger import Ledger
from inferd.tenants.limiter import Limiter
from inferd.tenants.metrics import KeyMetrics
from inferd.tenants.store import KeyStore
from inferd.tenants.store_watch import StoreWatch

log = logging.getLogger("inferd.tenants")

ISOLATE_CACHE = ("none", "per-key")


def open_tenants(data_dir: str | Path | None, bootstrap: Iterable[str] = (), *, storage: str = "memory://",
                 isolate_cache: str = "none", registry=None) -> Tenants:
    """Raises ValueError on a bad option, `TenantStoreError` on a store that cannot be opened."""
    if isolate_cache not in ISOLATE_CACHE:
        raise ValueError(f"--isolate-cache {isolate_cache!r}: use none or per-key")
    limiter = Limiter(storage)
    ring = KeyRing(KeyStore.in_dir(data_dir) if data_dir is not None else None, bootstrap)
    ledger = Ledger(ring, KeyMetrics(registry) if registry is not None else None)
    stored = len(ring.stored())
    if stored:  # said out loud: keys in a data dir turn auth on even without --api-key
        log.info("%d API keys in %s: every request but health needs one", stored, ring.store.path)
    tenants = Tenants(ring, limiter, ledger, isolate_cache=isolate_cache == "per-key")
    if ring.store is not None:
        tenants.watch = StoreWatch(ring)  # keys edited offline beside a running server take effect
    return tenants
