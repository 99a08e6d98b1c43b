"""The chat models a server loads on demand beside its own: every further
--model and every model in the store.

Each loaded model has its own engine. A request that names one holds a lease
on it (`use`) for as long as it runs: the first request loads it on a worker
thread and those that come meanwhile wait for the same load. Residency:
after its last request a model stays loaded for its keep-alive (--keep-alive,
or the request's Ollama `keep_alive`); a load that would pass
--max-loaded-models or --memory-budget first unloads the least recently used
idle model; a model with requests in flight is never unloaded; a model that
cannot fit even alone is refused with 507 and both sizes.

The server's own model (the first --model) loads at start and stays: the
limits count only the models loaded here."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inferd.chat.reasoning import think_token_ids
from inferd.chat.template import chat_template_for
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.http.errors import HTTPStatusError, ServiceUnavailable
from inferd.models.loader import LoadedModel
from inferd.serving.chat_defaults import template_defaults
from inferd.serving.chat_features import attach_chat_features
from inferd.serving.keep_alive import FOREVER, parse_keep_alive

log = logging.getLogger("inferd.models")

SWEEP_SECONDS = 0.25  # how often idle models past their keep-alive are looked for
ROOM_WAIT_SECONDS = 120.0  # how long a load waits for a busy model to become idle before 503


@dataclass
class ChatModel:
    """One loaded chat model's parts, as `ServerState` hands them to the routes."""
    config: ServeConfig
    names: tuple[str, ...]
    loaded: LoadedModel | None = None
    engine: AsyncEngine | None = None
    template: object | None = None
    grammar: object | None = None
    tool_parser: type | None = None
    think_markers: object | None = None


@dataclass
class HostedModel:
    name: str
    source: str  # what load_model takes: a path or a stored model's name
    file_bytes: int  # the weights on disk: the size before it is loaded
    aliases: tuple[str, ...] = ()
    chat: ChatModel | None = None
    loading: asyncio.Future | None = None
    leases: int = 0
    last_used: float = field(default_factory=time.time)
    keep_alive: float | None = 300.0  # seconds after the last request; None: stays loaded
    size: int = 0  # bytes once loaded: weights and KV cache
    loads: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def busy(self) -> bool:
        engine = self.chat.engine if self.chat is not None else None
        return self.leases > 0 or bool(engine is not None and engine._streams)

    @property
    def expires_at(self) -> float | None:
        return None if self.keep_alive is FOREVER else self.last_used + self.keep_alive

    @property
    def resident_bytes(self) -> int:
        return self.size or self.file_bytes


class ModelHost:
    def __init__(self, config: ServeConfig, models: list[HostedModel], budget: int,
                 loader: Callable[[str], LoadedModel], on_unload: Callable[[str], None] = lambda reason: None):
        self.config = config
        self.models = models
        self.budget = budget  # bytes the models loaded here may hold together
        self.max_loaded = config.max_loaded_models
        self.loader = loader
        self.on_unload = on_unload  # counts unloads by reason (metrics)
        self.unloads: dict[str, int] = {}
        self._room = asyncio.Lock()
        self._sweeper: asyncio.Task | None = None
        self.keep_alive = parse_keep_alive(config.keep_alive)
        for model in models:
            model.keep_alive = self.keep_alive

    # -- the roster ------------------------------------------------------------
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def find(self, name: str) -> HostedModel | None:
        """The model named `name`, or `name` with Ollama's default tag."""
        for candidate in (name, name.removesuffix(":latest")):
            for model in self.models:
                if candidate in model.names:
                    return model
        return None

    def loaded(self) -> list[HostedModel]:
        return [m for m in self.models if m.chat is not None]

    # -- leases ----------------------------------------------------------------
    async def acquire(self, model: HostedModel, keep_alive: float | None | str = "default") -> ChatModel:
        """Lease `model` for one request, loading it first when it is not loaded."""
        self._start_sweeper()
        model.leases += 1
        try:
            while model.chat is None:
                if model.loading is None:
                    model.loading = asyncio.ensure_future(self._load(model))
                await asyncio.shield(model.loading)
        except BaseException:
            model.leases -= 1
            raise
        # Each request sets how long the model stays after it, as in Ollama: its own keep_alive or the server's.
        model.keep_alive = self.keep_alive if keep_alive == "default" else keep_alive
        model.last_used = time.time()
        return model.chat

    async def release(self, model: HostedModel) -> None:
        model.leases -= 1
        model.last_used = time.time()
        if model.keep_alive == 0 and not model.busy:
            await self.unload(model, "requested")

    async def unload(self, model: HostedModel, reason: str) -> bool:
        """Unload `model` unless requests are in flight on it; True when it was unloaded."""
        if model.chat is None or model.busy:
            return False
        chat, model.chat, model.size = model.chat, None, 0
        self.unloads[reason] = self.unloads.get(reason, 0) + 1
        self.on_unload(reason)
        log.info("unloaded %s (%s)", model.name, reason)
        await asyncio.to_thread(self._free, chat)
        return True

    # -- loading ---------------------------------------------------------------
    async def _load(self, model: HostedModel) -> None:
        try:
            async with self._room:  # one load at a time: each sees the room the others left
                await self._make_room(model)
                started = time.monotonic()
                model.chat = await asyncio.to_thread(self._build, model)
                model.size = self._measure(model.chat)
                model.loads += 1
                model.last_used = time.time()
                log.info("loaded %s on demand in %.1fs (%d MiB with its KV cache)", model.name,
                         time.monotonic() - started, model.size >> 20)
        finally:
            model.loading = None

    def _build(self, model: HostedModel) -> ChatModel:
        loaded = self.loader(model.source)
        chat = ChatModel(self.config, model.names, loaded)
        chat.template = chat_template_for(loaded.tokenizer, self.config.chat_template)
        chat.template.defaults = template_defaults(self.config)
        attach_chat_features(chat, loaded)
        chat.engine = AsyncEngine(Engine(loaded, self.config, think_ids=think_token_ids(loaded.tokenizer)))
        return chat

    def _measure(self, chat: ChatModel) -> int:
        return _loaded_bytes(chat)

    async def _make_room(self, model: HostedModel) -> None:
        need = model.file_bytes
        if need > self.budget:
            raise HTTPStatusError(507, f"model {model.name!r} needs {_mib(need)} of memory, more than the "
                                       f"{_mib(self.budget)} models may use here (--memory-budget); "
                                       "give a larger --memory-budget or use a smaller model")
        deadline = time.monotonic() + ROOM_WAIT_SECONDS
        while True:
            others = [m for m in self.loaded() if m is not model]
            held = sum(m.resident_bytes for m in others)
            if (not self.max_loaded or len(others) < self.max_loaded) and held + need <= self.budget:
                return
            idle = sorted((m for m in others if not m.busy), key=lambda m: m.last_used)
            if idle:
                await self.unload(idle[0], "evicted")
                continue
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"model {model.name!r} waits for room: every loaded model has requests "
                                         "in flight; retry shortly", code="model_busy", headers={"Retry-After": "5"})
            await asyncio.sleep(0.05)  # a model in use is never unloaded under its requests

    # -- keep-alive ------------------------------------------------------------
    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            now = time.time()
            for model in self.loaded():
                expires = model.expires_at
                if expires is not None and expires <= now and model.loading is None:
                    await self.unload(model, "expired")

    def _free(self, chat: ChatModel) -> None:
        _free(chat)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for model in self.loaded():
            model.chat.engine.shutdown()
            model.chat = None


def _free(chat: ChatModel) -> None:
    chat.engine.shutdown()
    chat.engine = chat.loaded = None
    gc.collect()


def _loaded_bytes(chat: ChatModel) -> int:
    net = chat.loaded.model
    weights = sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))
    kv = sum(k.numel() * k.element_size() + v.numel() * v.element_size()
             for k, v in chat.engine.engine.runner.kv_caches)
    return weights + kv


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB" if size >= 2**20 else f"{size:,} bytes"


def available_memory() -> int:
    """Bytes of memory free for models now: MemAvailable on Linux, else free pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
