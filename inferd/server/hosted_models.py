"""Putting together a server's models loaded on demand (`serving.model_host`):
every --model after the first and every chat model in the store, minus the
server's own; the memory budget; their metrics."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.config import ServeConfig
from inferd.model_store import ModelStore, StoreError
from inferd.models.loader import load_model
from inferd.models.paths import resolve_model_path
from inferd.serving.model_host import HostedModel, ModelHost, available_memory
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


def build_host(state: ServerState) -> ModelHost | None:
    """The models this server loads on demand, or None when there are none.
    Raises ValueError on a bad option and ModelNotFoundError on a --model that is nowhere."""
    config = state.config
    budget = memory_budget(config)
    own = _path_of(config.model, config.data_dir)
    by_path: dict[Path, HostedModel] = {}  # names whose bytes are one model share its entry: one load, one engine

    def add(names: list[str], source: str, path: Path, size: int) -> None:
        taken = {n for m in by_path.values() for n in m.names} | set(state.served_names)
        names = [n for n in dict.fromkeys(names) if n not in taken]
        if not names:
            return
        if path == own:
            state.same_model_names.extend(names)
        elif path in by_path:
            by_path[path].aliases += tuple(names)
        else:
            by_path[path] = HostedModel(names[0], source, size, aliases=tuple(names[1:]))

    for source in config.models[1:]:
        name, path = resolve_model_path(source, config.data_dir)
        add([name], source, path.resolve(), _bytes(path))
    for manifest in _stored(config.data_dir):
        if not {"chat", "completion"} & set(manifest.capabilities):
            continue  # an embedding model: served with --embedding-model
        path = _stored_path(config.data_dir, manifest)
        if path is not None:
            name = manifest.model_name
            add([name.short, name.full], name.full, path.resolve(), manifest.size)
    models = list(by_path.values())
    if len(config.models) > 1 and config.default_model is None:
        state.served.strict = True  # several models named: a name none of them has is a 404, not the first model
    known = {*state.served_names, *(n for m in models for n in m.names)}
    for name in config.preload:
        if name not in known and name.removesuffix(":latest") not in known:
            raise ValueError(f"--preload {name}: no such model here; served: {', '.join(sorted(known))}")
    if not models:
        return None
    host = ModelHost(config, models, budget,
                     lambda source: load_model(source, config.dtype, config.device, config.weights, config.data_dir))
    if state.metrics is not None:
        state.metrics.registry.register(HostCollector(host))
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


def _stored(data_dir: str | None) -> list:
    try:
        return ModelStore.open(data_dir).models()
    except (StoreError, OSError) as error:
        log.warning("the model store cannot be read, so only the --model models are served: %s", error)
        return []


def _stored_path(data_dir: str | None, manifest) -> Path | None:
    try:
        return ModelStore.open(data_dir).resolve(manifest.model_name)
    except (StoreError, OSError):
        return None


def _path_of(model: str | None, data_dir: str | None) -> Path:
    return resolve_model_path(model, data_dir)[1].resolve()


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def close_host(state: ServerState) -> None:
    if state.host is not None:
        await state.host.close()
        await asyncio.sleep(0)
