"""What every route may need, held on `app.state.inferd`."""

from __future__ import annotations

import functools
import hashlib
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import Request

from inferd import __version__
from inferd.chat.template import ChatTemplate
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.models.default import DEFAULT_MODEL_NAME
from inferd.models.loader import LoadedModel
from inferd.http.errors import NotFound, ServiceUnavailable
from inferd.serving.cards import RequestCards
from inferd.serving.sampling_defaults import server_sampling
from inferd.serving.served_models import CHAT, ServedModels


class ChosenModel(Protocol):
    """A chat model a request chose (serving.model_host.ChatModel)."""
    names: tuple[str, ...]


# (the state, the model) a request was routed to; unset: the server's own model.
_CHOSEN: ContextVar[tuple[object, ChosenModel] | None] = ContextVar("inferd_chosen_model", default=None)


def choose_model(state: ServerState, model: ChosenModel | None) -> None:
    """Route what runs in this context (one request) to `model`."""
    _CHOSEN.set((state, model) if model is not None else None)


def current_model(state: ServerState) -> ChosenModel | None:
    chosen = _CHOSEN.get()
    return chosen[1] if chosen is not None and chosen[0] is state else None


class PerModel:
    """A chat-model part of the state: the chosen model's when a request chose one, else the server's own."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, state, owner=None):
        if state is None:
            return self
        chosen = current_model(state)
        if chosen is not None:
            return getattr(chosen, self.name)
        return state.__dict__.get(self.name)

    def __set__(self, state, value) -> None:
        state.__dict__[self.name] = value


@dataclass
class ServerState:
    config: ServeConfig
    model_name: str = ""
    metrics: object | None = None  # server.metrics.ServerMetrics when --metrics
    responses_store: object | None = None  # store.responses.ResponseStore; None keeps no responses
    audio: object | None = None  # audio.service.AudioService; its models load on first use
    api_keys: frozenset[str] = frozenset()  # the bootstrap keys (--api-key, --api-key-file, INFERD_API_KEY)
    tenants: object | None = None  # tenants.gate.Tenants: the keys, their limits and usage
    cards: RequestCards = field(default_factory=RequestCards)
    served: ServedModels = field(default_factory=ServedModels)  # every model and what it can do
    started: float = field(default_factory=time.time)
    draining: bool = False
    load_failed: bool = False
    own_name: str = ""  # the model's name before --alias renamed it
    host: object | None = None  # serving.model_host.ModelHost: the models loaded on demand beside this one
    same_model_names: list[str] = field(default_factory=list)  # stored names for this model's very bytes

    # The chat model's parts. A request for a model loaded on demand sees that model's
    # (serving.model_host: `use_model` sets it for the request); every other request the server's own.
    engine = PerModel()  # AsyncEngine; None while the model loads
    loaded = PerModel()  # LoadedModel
    template = PerModel()  # ChatTemplate
    grammar = PerModel()  # chat.grammar.GrammarCompiler
    tool_parser = PerModel()  # chat.tool_parsers.ToolParser subclass for this model
    think_markers = PerModel()  # chat.reasoning.ThinkMarkers when the model reasons

    def __post_init__(self) -> None:
        # llama-server's --alias renames the served model: the first alias is its id and what answers report.
        self.own_name = self.model_name
        if self.config.alias:
            self.model_name = self.config.alias[0]
        self.served.default, self.served.strict = self.config.default_model, self.config.strict_model_names
        self.served.hosted = self._chosen_models_on_demand

    def _chosen_models_on_demand(self) -> int:
        """The models loaded on demand that someone chose to serve: not the bundled Gemma,
        which every store lists from its first use, nor this server's own once unloaded (`own`)."""
        models = self.host.models if self.host is not None else []
        return sum(1 for m in models if DEFAULT_MODEL_NAME not in m.names and not m.own)

    @property
    def ready(self) -> bool:
        return self.engine is not None or self.served.loaded

    def require_engine(self) -> AsyncEngine:
        if self.engine is None:
            if getattr(self.host, "own", None) is not None:  # unloaded by a keep_alive (server.own_model)
                raise ServiceUnavailable(f"model {self.model_name!r} is unloaded (a request's keep_alive); a request "
                                         "that generates with it loads it again", code="model_unloaded",
                                         headers={"Retry-After": "2"})
            if self.served.loaded:
                self.served.pick(None, CHAT)  # no chat model here: a 400 that says so
            raise ServiceUnavailable("the model is still loading; retry shortly", code="loading",
                                     headers={"Retry-After": "2"})
        return self.engine

    @property
    def system_fingerprint(self) -> str | None:
        """Stable per build and model: changes when the inferd version, the weights
        file or how they are held changes, as OpenAI's says the backend changed."""
        if self.loaded is None:
            return None
        what = f"{__version__}|{self.own_name}|{self.loaded.path}|{self.loaded.dtype}|{self.config.weights}"
        return _fingerprint(what)

    @property
    def sampling_defaults(self) -> dict:
        """What requests that leave sampling fields unset run with (--temp, --seed, ...)."""
        return server_sampling(self.config)

    @property
    def served_names(self) -> list[str]:
        """The chat model's names: its id first, then the other aliases and its own name."""
        chosen = current_model(self)
        if chosen is not None:
            return list(chosen.names)
        return list(dict.fromkeys([self.model_name, *self.config.alias, self.own_name, *self.same_model_names]))

    def every_name(self) -> list[str]:
        """What a 404 lists: the server's own model, then every model it loads on demand."""
        own = list(dict.fromkeys([self.model_name, *self.config.alias, self.own_name, *self.same_model_names]))
        return own + ([n for n in self.host.names() if n not in own] if self.host is not None else [])

    def reported_model(self, requested: str | None) -> str:
        """The model an answer names: the one asked for when served here under that name,
        else the model that served it (--default-model, or the one model served)."""
        if requested and requested in self.served_names:
            return requested
        meant = self.served.meant(requested) if requested else None
        return meant.name if meant is not None else self.model_name

    def check_model(self, requested: str | None) -> None:
        """Accept the served id, an alias, no name at all, or a name that goes to
        the default model (served_models.ServedModels.meant)."""
        if requested and requested not in self.served_names:
            meant = self.served.meant(requested)
            if meant is not None:
                self.served.pick(meant.name, CHAT)  # served here, but not for chat: a 400 that says so
                return
            raise NotFound(
                f"model {requested!r} is not served here; this server serves {', '.join(map(repr, self.every_name()))}",
                param="model", code="model_not_found",
            )


def get_state(request: Request) -> ServerState:
    return request.app.state.inferd


@functools.lru_cache(maxsize=64)
def _fingerprint(what: str) -> str:
    """Asked for by every streamed chunk: hashed once per model."""
    return "fp_" + hashlib.sha256(what.encode()).hexdigest()[:12]
