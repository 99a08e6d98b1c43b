"""Building a router from its options, and starting and stopping its background work.

Every policy is wrapped in `direct`, so an `X-Worker-Id` header is honoured
whatever `--policy` says (an endpoint picker in front decides; the router
still keeps its books). In precise mode each worker that advertises the
"kv-events" capability gets a KV-event subscription; static workers are
assumed to be inferd workers and advertise it, since `--policy precise` is
only meaningful over inferd workers (any other subscription just keeps
retrying while the policy falls back to kv-aware for lack of a view).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from inferd.config import RouterOptions
from inferd.discovery.record import parse_etcd_address
from inferd.discovery.static import parse_workers
from inferd.router.breaker import CircuitBreaker
from inferd.router.fleet import Fleet
from inferd.router.health import check_fleet, run_health_checks
from inferd.router.job_charges import run_charge_claims
from inferd.router.policies import KV_AWARE_OPTIONS, make_policy
from inferd.router.policies.base import Policy
from inferd.router.proxy import Proxy
from inferd.router.request_cards import TraceBook
from inferd.router.state import RouterState
from inferd.tenants.build import open_tenants

log = logging.getLogger("inferd.router")

STATIC = "static"
KV_EVENTS = "kv-events"


def build_policy(config: RouterOptions, lookup: Callable, index=None) -> Policy:
    kv_options = {name: getattr(config, name) for name in KV_AWARE_OPTIONS}
    if config.policy == "direct":
        return make_policy("direct", lookup=lookup)
    if config.policy == "kv-aware":
        inner = make_policy("kv-aware", **kv_options)
    elif config.policy == "precise":
        inner = make_policy("precise", kv_overlap_weight=config.kv_overlap_weight, index=index, **kv_options)
    else:
        inner = make_policy(config.policy)
    return make_policy("direct", fallback=inner, lookup=lookup)


def build_router_state(config: RouterOptions, *, clock: Callable[[], float] = time.monotonic,
                       transport: httpx.AsyncBaseTransport | None = None, metrics: bool | None = None,
                       key_store_dir=None) -> RouterState:
    """Everything but the running tasks; raises ValueError on bad options. Managed keys
    live in `key_store_dir` (None: in memory only)."""
    records = parse_workers(list(config.worker))
    if not records and not config.etcd:
        raise ValueError("no workers: give --worker URL (repeatable) or --etcd HOST:PORT")
    if config.etcd:
        from inferd.discovery.etcd_watch import require_aetcd

        parse_etcd_address(config.etcd)
        require_aetcd()  # fail at start, not in the background
    client = httpx.AsyncClient(
        transport=transport,
        # Streams can outnumber any fixed pool; workers bound their own concurrency.
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        timeout=httpx.Timeout(10.0),
    )
    index = subscriber = tokenize = None
    if config.policy == "precise":
        from inferd.router.kv_index import KvIndex
        from inferd.router.kv_subscriber import KvSubscriber
        from inferd.router.prompt_tokens import PromptTokenizer

        index = KvIndex()
        subscriber = KvSubscriber(index, client, api_key=config.worker_api_key)
        tokenize = PromptTokenizer.for_model(config.tokenizer)
    fleet_box: list[Fleet] = []
    policy = build_policy(config, lambda worker_id: fleet_box[0].get(worker_id), index)

    def breaker() -> CircuitBreaker:
        return CircuitBreaker(config.breaker_failures, config.breaker_successes, config.breaker_cooldown, clock=clock)

    fleet = Fleet(policy, breaker, attach=subscriber.attach if subscriber is not None else None)
    fleet_box.append(fleet)
    proxy = Proxy(fleet, policy, client, request_timeout=config.request_timeout or None)
    state = RouterState(config=config, fleet=fleet, policy=policy, client=client, proxy=proxy,
                        api_keys=frozenset(k for k in config.api_key if k), tokenize=tokenize,
                        subscriber=subscriber, clock=clock)
    if config.metrics if metrics is None else metrics:
        from inferd.router.metrics import RouterMetrics

        state.metrics = proxy.metrics = RouterMetrics(fleet)
    state.traces = TraceBook()
    state.tenants = open_tenants(key_store_dir, state.api_keys, storage=config.rate_limit_storage,
                                 registry=state.metrics.registry if state.metrics is not None else None)
    for record in records:
        if config.policy == "precise":
            record.capabilities = [*record.capabilities, KV_EVENTS]
    state.static_records = records
    return state


async def start_router(state: RouterState) -> None:
    """Join the static workers and start health checks and the etcd watch (inside the running loop)."""
    for record in state.static_records:
        state.fleet.upsert(record, STATIC)
    config = state.config
    if config.health_interval > 0:
        # One check before serving: loading workers start out of rotation, served models are known.
        await check_fleet(state.fleet, state.client, state.worker_headers)
        state.tasks.append(asyncio.create_task(
            run_health_checks(state.fleet, state.client, config.health_interval, state.worker_headers),
            name="health checks"))
    state.tasks.append(asyncio.create_task(run_charge_claims(state), name="job charges"))
    if config.etcd:
        from inferd.discovery.etcd_watch import EtcdWatcher

        host, port = parse_etcd_address(config.etcd)
        state.etcd = EtcdWatcher(state.fleet, host, port, config.etcd_prefix)
        state.tasks.append(asyncio.create_task(state.etcd.run(), name="etcd watch"))
        from inferd.router.shared_keys import SharedKeys

        state.shared_keys = SharedKeys(state.tenants.ring, host, port, config.etcd_keys_prefix)
        state.tasks.append(asyncio.create_task(state.shared_keys.run(), name="etcd keys watch"))
    log.info("routing with policy %s over %d static workers%s", config.policy, len(state.static_records),
             f", watching etcd {config.etcd} {config.etcd_prefix}" if config.etcd else "")


async def stop_router(state: RouterState) -> None:
    for task in state.tasks:
        task.cancel()
    await asyncio.gather(*state.tasks, return_exceptions=True)
    state.tasks.clear()
    if state.subscriber is not None:
        await state.subscriber.close()
    await state.client.aclose()
    await asyncio.to_thread(state.tenants.close)  # usage and last-used times not yet written
