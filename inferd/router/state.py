"""What the router's routes need, held on `app.state.router`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from fastapi import Request

from inferd.config import RouterOptions
from inferd.router.fleet import Fleet
from inferd.router.policies.base import Policy
from inferd.router.proxy import Proxy
from inferd.router.stored_responses import ResponseOwners


@dataclass
class RouterState:
    config: RouterOptions
    fleet: Fleet
    policy: Policy
    client: httpx.AsyncClient  # one pool for forwarding, health checks and KV events
    proxy: Proxy
    metrics: object | None = None  # router.metrics.RouterMetrics when --metrics
    api_keys: frozenset[str] = frozenset()  # the bootstrap keys (--api-key, INFERD_API_KEY)
    tenants: object | None = None  # tenants.gate.Tenants: the keys, their limits and usage
    owners: ResponseOwners = field(default_factory=ResponseOwners)
    tokenize: Callable | None = None  # precise mode: the prompt's token ids, rendered as a worker would
    subscriber: object | None = None  # router.kv_subscriber.KvSubscriber in precise mode
    clock: Callable[[], float] = time.monotonic
    static_records: list = field(default_factory=list)  # discovery.record.WorkerRecord from --worker
    etcd: object | None = None  # discovery.etcd_watch.EtcdWatcher with --etcd
    shared_keys: object | None = None  # router.shared_keys.SharedKeys with --etcd: one key set for all replicas
    traces: object | None = None  # router.request_cards.TraceBook: forwarded requests' trace ids and keys
    tasks: list[asyncio.Task] = field(default_factory=list)  # health checks, etcd watch

    @property
    def worker_headers(self) -> dict[str, str]:
        """What the router sends on its own requests to workers (health, lookups)."""
        key = self.config.worker_api_key
        return {"authorization": f"Bearer {key}"} if key else {}


def get_state(request: Request) -> RouterState:
    return request.app.state.router
