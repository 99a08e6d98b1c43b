"""Putting together a server's models loaded on demand (`serving.model_host`):
its roster (`model_roster`: further --model models and the store's), the
memory budget, preloading, their metrics."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.config import ServeConfig
from inferd.models.encoder_loader import encoder_dtype, load_encoder
from inferd.models.loader import load_model, resolve_device
from inferd.models.paths import resolve_model_path
from inferd.server.model_roster import check_aliases, read_roster, store_stamp
from inferd.server.own_model import follow_own_keep_alive
from inferd.serving.model_host import ModelHost, available_memory
from inferd.serving.served_models import CHAT
from inferd.serving.state import ServerState

log = logging.getLogger("inferd.serve")

DEFAULT_BUDGET_SHARE = 0.8  # of the memory available at start, without --memory-budget
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from "8G", "512M", "1.5GiB" or a plain number of bytes; ValueError otherwise."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"--memory-budget {text!r} is not a size: give bytes or a number with K, M, G or T (8G, 512M)")
    return int(float(match[1]) * 1024 ** "_kmgt".index(match[2].lower() or "_"))


def memory_budget(config: ServeConfig) -> int:
    if config.memory_budget:
        return parse_size(config.memory_budget)
    return int(available_memory() * DEFAULT_BUDGET_SHARE)


def build_host(state: ServerState) -> ModelHost:
    """The models this server loads on demand (`model_roster`), which follow its store.
    Raises ValueError on a bad option and ModelNotFoundError on a --model that is nowhere."""
    config = state.config
    budget = memory_budget(config)
    models = read_roster(state)
    check_aliases(state, models)
    if len(config.models) > 1 and config.default_model is None:
        state.served.strict = True  # several models named: a name none of them has is a 404, not the first model
    known = {*state.served_names, *(n for m in models for n in m.names)}
    for name in config.preload:
        if name not in known and name.removesuffix(":latest") not in known:
            raise ValueError(f"--preload {name}: no such model here; served: {', '.join(sorted(known))}")
    device = resolve_device(config.device)
    host = ModelHost(config, models, budget,
                     lambda source: load_model(source, config.dtype, config.device, config.weights, config.data_dir),
                     encoder_loader=lambda source, name: load_encoder(
                         name, resolve_model_path(source, config.data_dir)[1],
                         encoder_dtype(config.embedding_dtype, device), device))
    host.follow(lambda: store_stamp(config.data_dir), lambda: read_roster(state))
    follow_own_keep_alive(state, host)
    state.served.on_demand = lambda: [(m.name, [m.kind]) for m in host.models if m.kind != CHAT]
    if state.metrics is not None:
        state.metrics.registry.register(HostCollector(host))
    if models:
        log.info("%d more models load on demand (%s); up to %s at once within %d MiB", len(models),
                 ", ".join(m.name for m in models), config.max_loaded_models or "any number", budget >> 20)
    return host


async def preload(state: ServerState) -> None:
    """Load each --preload model now (the server's own is loaded anyway)."""
    host = state.host
    for name in state.config.preload:
        model = host.find(name) if host is not None else None
        if model is None:
            continue
        try:
            await host.acquire(model)
            await host.release(model)
        except Exception:
            log.exception("--preload %s failed to load", name)


class HostCollector(Collector):
    def __init__(self, host: ModelHost):
        self.host = host

    def collect(self) -> Iterator[Metric]:
        unloads = CounterMetricFamily("inferd_model_unloads", "models loaded on demand and unloaded, by why: "
                                      "evicted (room for another), expired (keep-alive), requested",
                                      labels=["reason"])
        for reason in ("evicted", "expired", "requested"):
            unloads.add_metric([reason], self.host.unloads.get(reason, 0))
        yield unloads
        loaded = self.host.loaded()
        yield GaugeMetricFamily("inferd_models_loaded", "models loaded on demand now", value=len(loaded))
        yield GaugeMetricFamily("inferd_models_loaded_bytes", "memory they hold (weights and KV cache)",
                                value=sum(m.resident_bytes for m in loaded))
        yield CounterMetricFamily("inferd_model_loads", "loads of models on demand",
                                  value=sum(m.loads for m in self.host.models))


async def close_host(state: ServerState) -> None:
    if state.host is not None:
        await state.host.close()
        await asyncio.sleep(0)
