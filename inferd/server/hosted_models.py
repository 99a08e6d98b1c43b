"""Putting together a server's models loaded on demand (`serving.model_host`):
every --model after the first and every model in the store (chat, embedding
or rerank), minus those the server loads at start (its own, each
--embedding-model); the memory budget; their metrics.

A stored Hugging Face repository answers to `owner/repo` and, where no other
model has it, to `repo` as written and lowercased (`all-MiniLM-L6-v2`,
`all-minilm-l6-v2`)."""

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
from inferd.models.default_embedding import BUNDLED_EMBEDDING_NAMES, DEFAULT_EMBEDDING_NAME, resolve_with_bundled
from inferd.models.encoder_loader import encoder_dtype, folder_kind, load_encoder
from inferd.models.loader import load_model, resolve_device
from inferd.models.paths import resolve_model_path
from inferd.serving.model_host import HostedModel, ModelHost, available_memory
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


def build_host(state: ServerState) -> ModelHost | None:
    """The models this server loads on demand, or None when there are none.
    Raises ValueError on a bad option and ModelNotFoundError on a --model that is nowhere."""
    config = state.config
    budget = memory_budget(config)
    own = _path_of(config.model, config.data_dir)
    encoders, encoder_names = _encoders_at_start(config)
    by_path: dict[Path, HostedModel] = {}  # names whose bytes are one model share its entry: one load, one engine

    def add(names: list[str], source: str, path: Path, size: int, kind: str = CHAT) -> None:
        taken = {n for m in by_path.values() for n in m.names} | set(state.served_names) | encoder_names
        names = [n for n in dict.fromkeys(names) if n not in taken]
        if not names or path in encoders:
            return
        if path == own:
            state.same_model_names.extend(names)
        elif path in by_path:
            by_path[path].aliases += tuple(names)
        else:
            by_path[path] = HostedModel(names[0], source, size, aliases=tuple(names[1:]), kind=kind)

    for source in config.models[1:]:
        name, path = resolve_model_path(source, config.data_dir)
        add([name], source, path.resolve(), _bytes(path), folder_kind(path))
    stored = [(m, p) for m in _stored(config.data_dir) if (p := _stored_path(config.data_dir, m)) is not None]
    for manifest, path in stored:
        name = manifest.model_name
        kind = CHAT if {"chat", "completion"} & set(manifest.capabilities) else folder_kind(path)
        if kind == CHAT and "embeddings" in manifest.capabilities:
            log.info("%s is a GGUF embedding model, which inferd does not serve; skipped", name.short)
            continue
        add([name.short, name.full], name.full, path.resolve(), manifest.size, kind)
    for manifest, path in stored:  # short names last: a model's own name wins over another's short one
        repo = manifest.model_name
        if repo.is_hub_repo and path.resolve() in by_path:
            short = repo.name.rsplit("/", 1)[1] + ("" if repo.tag == "latest" else f":{repo.tag}")
            add([short, short.lower()], repo.full, path.resolve(), manifest.size)
    models = list(by_path.values())
    if len(config.models) > 1 and config.default_model is None:
        state.served.strict = True  # several models named: a name none of them has is a 404, not the first model
    known = {*state.served_names, *(n for m in models for n in m.names)}
    for name in config.preload:
        if name not in known and name.removesuffix(":latest") not in known:
            raise ValueError(f"--preload {name}: no such model here; served: {', '.join(sorted(known))}")
    if not models:
        return None
    device = resolve_device(config.device)
    host = ModelHost(config, models, budget,
                     lambda source: load_model(source, config.dtype, config.device, config.weights, config.data_dir),
                     encoder_loader=lambda source, name: load_encoder(
                         name, resolve_model_path(source, config.data_dir)[1],
                         encoder_dtype(config.embedding_dtype, device), device))
    state.served.on_demand = lambda: [(m.name, [m.kind]) for m in models if m.kind != CHAT]
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


def _encoders_at_start(config: ServeConfig) -> tuple[set[Path], set[str]]:
    """The paths and names of the --embedding-model models (loaded at start, not on demand)."""
    paths, names = set(), set()
    for model in config.embedding_model:
        name, path = resolve_with_bundled(model, config.data_dir)
        paths.add(path.resolve())
        names |= {model, name, *(BUNDLED_EMBEDDING_NAMES if name == DEFAULT_EMBEDDING_NAME else ())}
    return paths, names | {f"{n}:latest" for n in names}


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
