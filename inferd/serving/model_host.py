"""The models a server loads on demand beside its own: every further --model
and every model in the store, chat models and embedding or rerank models alike.

Each loaded chat model has its own engine, each encoder its own thread. A request that names one holds a lease
on it (`use`) for as long as it runs: the first request loads it on a worker
thread and those that come meanwhile wait for the same load. Residency:
after its last request a model stays loaded for its keep-alive (--keep-alive,
or the request's Ollama `keep_alive`); a load that would pass
--max-loaded-models or --memory-budget first unloads the least recently used
idle model; a model with requests in flight is never unloaded; a model that
cannot fit even alone is refused with 507 and both sizes.

The server's own model (the first --model) and every --embedding-model load
at start and stay: the limits count only the models loaded here. A request's
keep_alive 0 unloads the server's own chat model too (Ollama's semantics);
from then on it is one of the models loaded here (`adopt_own`)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from inferd.chat.reasoning import think_token_ids
from inferd.chat.template import chat_template_for
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.embedding.build import pooled_chat_model, pooled_encoder
from inferd.engine.embedding.model import PooledModel
from inferd.engine.engine import Engine
from inferd.http.errors import HTTPStatusError, ServiceUnavailable
from inferd.models.encoder_loader import LoadedEncoder
from inferd.models.loader import LoadedModel
from inferd.serving.chat_defaults import template_defaults
from inferd.serving.chat_features import attach_chat_features
from inferd.serving.keep_alive import FOREVER, parse_keep_alive
from inferd.serving.served_models import CHAT, EMBED, ServedModel

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
class EncoderModel:
    """One loaded embedding or rerank model: what `served_models.pick` answers for it. A decoder that
    embeds (a GGUF embedding model) runs its forwards on an engine of its own."""
    loaded: LoadedEncoder | LoadedModel
    served: ServedModel
    engine: AsyncEngine | None = None

    @property
    def pooled(self) -> PooledModel:
        return self.served.pooled


@dataclass
class HostedModel:
    name: str
    source: str  # what load_model (or load_encoder) takes: a path or a stored model's name
    file_bytes: int  # the weights on disk: the size before it is loaded
    aliases: tuple[str, ...] = ()
    kind: str = CHAT  # chat, or served_models' embed or rerank: an encoder
    pooling: str | None = None  # a decoder that embeds (a GGUF embedding model): its hidden states pooled so
    chat: ChatModel | None = None
    encoder: EncoderModel | None = None
    loading: asyncio.Future | None = None
    leases: int = 0
    last_used: float = field(default_factory=time.time)
    keep_alive: float | None = 300.0  # seconds after the last request; None: stays loaded
    size: int = 0  # bytes once loaded: weights and KV cache
    loads: int = 0
    own: bool = False  # the server's own model, loaded at start and unloaded since (`adopt_own`)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def is_loaded(self) -> bool:
        return self.chat is not None or self.encoder is not None

    @property
    def in_use(self) -> bool:
        """Loaded, loading or leased: its entry must stay as it is."""
        return self.is_loaded or self.leases > 0 or self.loading is not None

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
                 loader: Callable[[str], LoadedModel], on_unload: Callable[[str], None] = lambda reason: None,
                 encoder_loader: Callable[[str, str], LoadedEncoder] | None = None):
        self.config = config
        self.models = models
        self.budget = budget  # bytes the models loaded here may hold together
        self.max_loaded = config.max_loaded_models
        self.loader = loader  # a chat model's source -> LoadedModel
        self.encoder_loader = encoder_loader  # (source, name) -> LoadedEncoder
        self.on_unload = on_unload  # counts unloads by reason (metrics)
        self.unloads: dict[str, int] = {}
        self._room = asyncio.Lock()
        self._sweeper: asyncio.Task | None = None
        self.keep_alive = parse_keep_alive(config.keep_alive)
        for model in models:
            model.keep_alive = self.keep_alive
        self._stamp: Callable[[], object] = lambda: None  # changes when the roster may have
        self._reader: Callable[[], list[HostedModel]] | None = None
        self._seen: object = None
        self._syncing: asyncio.Future | None = None
        self.own: HostedModel | None = None  # the server's own model once a request unloaded it
        self.own_requests = 0  # requests running on the server's own model while it is still its own
        self.own_unload_wanted = False  # a keep_alive 0 came while they ran: unload once the last ends
        self.own_keep_alive: float | None = FOREVER  # what the last request on it said (none: it stays)
        self.own_last_used = time.time()
        self.own_expired: Callable[[], Awaitable[object]] | None = None  # unloads it (server.own_model)

    def follow(self, stamp: Callable[[], object], reader: Callable[[], list[HostedModel]]) -> None:
        """Read the roster again with `reader` (on a worker thread) whenever `stamp()` changes."""
        self._stamp, self._reader, self._seen = stamp, reader, stamp()

    async def sync(self) -> None:
        """Take in models added since the roster was read, and forget removed ones not in use."""
        if self._reader is None or self._stamp() == self._seen:
            return
        if self._syncing is None:
            self._syncing = asyncio.ensure_future(self._read_again())
        try:
            await asyncio.shield(self._syncing)
        finally:
            self._syncing = None

    async def _read_again(self) -> None:
        self._seen = self._stamp()
        try:
            fresh = await asyncio.to_thread(self._reader)
        except Exception:
            log.exception("the models to load on demand could not be read again; keeping those known")
            return
        known = {m.name: m for m in self.models}
        kept = []
        for model in fresh:
            old = known.pop(model.name, None)
            if old is None:
                model.keep_alive = self.keep_alive
                log.info("%s is in the store now: it loads on demand", model.name)
                kept.append(model)
                continue
            if old.kind == model.kind or not old.in_use:  # what the name means now; what is loaded stays
                old.source, old.file_bytes, old.kind = model.source, model.file_bytes, model.kind
                old.aliases = model.aliases
            kept.append(old)
        for model in known.values():  # removed from the store: unloaded now unless requests run on it
            if model.is_loaded and not model.busy and not model.own:
                await self.unload(model, "requested")
        # A removed model in use stays till unloaded; the server's own is no stored model: it stays.
        self.models = kept + [m for m in known.values() if m.in_use or m.own]

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
        return [m for m in self.models if m.is_loaded]

    def engines(self) -> list[AsyncEngine]:
        """The engines of the loaded models (chat, and decoders pooled for embeddings)."""
        parts = [m.chat if m.chat is not None else m.encoder for m in self.loaded()]
        return [p.engine for p in parts if p is not None and p.engine is not None]

    # -- leases ----------------------------------------------------------------
    async def acquire(self, model: HostedModel, keep_alive: float | None | str = "default") -> ChatModel | EncoderModel:
        """Lease `model` for one request, loading it first when it is not loaded."""
        self._start_sweeper()
        model.leases += 1
        try:
            while not model.is_loaded:
                if model.loading is None:
                    model.loading = asyncio.ensure_future(self._load(model))
                await asyncio.shield(model.loading)
        except BaseException:
            model.leases -= 1
            raise
        # Each request sets how long the model stays after it, as in Ollama: its own keep_alive or the server's
        # (the server's own model stays, as it did before it was unloaded).
        model.keep_alive = (FOREVER if model.own else self.keep_alive) if keep_alive == "default" else keep_alive
        model.last_used = time.time()
        return model.chat if model.chat is not None else model.encoder

    async def release(self, model: HostedModel) -> None:
        model.leases -= 1
        model.last_used = time.time()
        if model.keep_alive == 0 and not model.busy:
            await self.unload(model, "requested")

    async def unload(self, model: HostedModel, reason: str) -> bool:
        """Unload `model` unless requests are in flight on it; True when it was unloaded."""
        if not model.is_loaded or model.busy:
            return False
        parts = model.chat if model.chat is not None else model.encoder
        model.chat, model.encoder, model.size = None, None, 0
        self.unloads[reason] = self.unloads.get(reason, 0) + 1
        self.on_unload(reason)
        log.info("unloaded %s (%s)", model.name, reason)
        await asyncio.to_thread(self._free, parts)
        return True

    def own_request_ended(self, keep_alive: float | None | str) -> None:
        """A request on the server's own model, still loaded from the start, ended: its keep_alive sets how
        long the model stays, as for any model (without one: for good, the server's own default)."""
        self.own_keep_alive = FOREVER if keep_alive == "default" else keep_alive
        self.own_last_used = time.time()
        if self.own_keep_alive is not FOREVER:
            self._start_sweeper()

    async def adopt_own(self, model: HostedModel, parts: ChatModel, reason: str = "requested") -> None:
        """The server's own model, loaded at start, is unloaded (Ollama's keep_alive): from now on it is one
        of the models loaded here on demand, under `model` (its names, its source, unloaded)."""
        model.own, model.keep_alive = True, FOREVER
        self.own = model
        self.models.insert(0, model)
        self.unloads[reason] = self.unloads.get(reason, 0) + 1
        self.on_unload(reason)
        log.info("unloaded %s, the server's own model (%s); it loads again on demand", model.name, reason)
        await asyncio.to_thread(self._free, parts)

    # -- loading ---------------------------------------------------------------
    async def _load(self, model: HostedModel) -> None:
        try:
            async with self._room:  # one load at a time: each sees the room the others left
                await self._make_room(model)
                started = time.monotonic()
                parts = await asyncio.to_thread(self._build, model)
                if isinstance(parts, EncoderModel):
                    model.encoder = parts
                else:
                    model.chat = parts
                model.size = self._measure(parts)
                model.loads += 1
                model.last_used = time.time()
                log.info("loaded %s on demand in %.1fs (%d MiB%s)", model.name, time.monotonic() - started,
                         model.size >> 20, " with its KV cache" if model.chat is not None else "")
        finally:
            model.loading = None

    def _build(self, model: HostedModel) -> ChatModel | EncoderModel:
        if model.kind != CHAT:
            return self._build_encoder(model) if model.pooling is None else self._build_pooled_decoder(model)
        loaded = self.loader(model.source)
        chat = ChatModel(self.config, model.names, loaded)
        chat.template = chat_template_for(loaded.tokenizer, self.config.chat_template)
        chat.template.defaults = template_defaults(self.config)
        attach_chat_features(chat, loaded)
        chat.engine = AsyncEngine(Engine(loaded, self.config, think_ids=think_token_ids(loaded.tokenizer)))
        return chat

    def _build_encoder(self, model: HostedModel) -> EncoderModel:
        loaded = self.encoder_loader(model.source, model.name)
        pooled = pooled_encoder(loaded, self.config.embedding_batch_tokens, self.config.max_queue)
        return EncoderModel(loaded, ServedModel(model.name, frozenset({pooled.kind}), model.aliases, pooled))

    def _build_pooled_decoder(self, model: HostedModel) -> EncoderModel:
        """A decoder's embeddings, as `--model it --pooling MODE` serves them: its last hidden states pooled."""
        loaded = self.loader(model.source)
        engine = AsyncEngine(Engine(loaded, self.config))
        pooled = pooled_chat_model(loaded, engine, model.pooling, self.config.embedding_batch_tokens,
                                   self.config.max_queue)
        pooled.name = model.name
        return EncoderModel(loaded, ServedModel(model.name, frozenset({EMBED}), model.aliases, pooled), engine)

    def _measure(self, parts: ChatModel | EncoderModel) -> int:
        return _loaded_bytes(parts)

    async def _make_room(self, model: HostedModel) -> None:
        if model.own:
            return  # the server's own model was there before any limit: it counts for none, as at start
        need = model.file_bytes
        if need > self.budget:
            raise HTTPStatusError(507, f"model {model.name!r} needs {_mib(need)} of memory, more than the "
                                       f"{_mib(self.budget)} models may use here (--memory-budget); "
                                       "give a larger --memory-budget or use a smaller model")
        deadline = time.monotonic() + ROOM_WAIT_SECONDS
        while True:
            others = [m for m in self.loaded() if m is not model and not m.own]
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
            if (self.own is None and self.own_expired is not None and self.own_keep_alive is not FOREVER
                    and self.own_requests == 0 and self.own_last_used + self.own_keep_alive <= now):
                await self.own_expired()

    def _free(self, parts: ChatModel | EncoderModel) -> None:
        _free(parts)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for model in self.loaded():
            if model.chat is not None:
                model.chat.engine.shutdown()
            else:
                model.encoder.pooled.close()
                if model.encoder.engine is not None:
                    model.encoder.engine.shutdown()
            model.chat = model.encoder = None


def _free(parts: ChatModel | EncoderModel) -> None:
    if isinstance(parts, EncoderModel):
        parts.pooled.close()  # fails what still waits (nothing: an idle model is unloaded) and ends its thread
        if parts.engine is not None:
            parts.engine.shutdown()
        parts.served.pooled = parts.loaded = parts.engine = None
    else:
        parts.engine.shutdown()
        parts.engine = parts.loaded = None
    gc.collect()


def _loaded_bytes(parts: ChatModel | EncoderModel) -> int:
    net = parts.loaded.model
    weights = sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))
    if parts.engine is None:
        return weights  # an encoder: activations live only while a batch computes
    kv = sum(k.numel() * k.element_size() + v.numel() * v.element_size()
             for k, v in parts.engine.engine.runner.kv_caches)
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
