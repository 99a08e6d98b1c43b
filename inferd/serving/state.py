"""What every route may need, held on `app.state.inferd`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import Request

from inferd.chat.template import ChatTemplate
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.models.loader import LoadedModel
from inferd.http.errors import NotFound, ServiceUnavailable
from inferd.serving.cards import RequestCards
from inferd.serving.sampling_defaults import server_sampling
from inferd.serving.served_models import CHAT, ServedModels


@dataclass
class ServerState:
    config: ServeConfig
    model_name: str = ""
    engine: AsyncEngine | None = None  # None while the model loads
    loaded: LoadedModel | None = None
    template: ChatTemplate | None = None
    grammar: object | None = None  # chat.grammar.GrammarCompiler
    tool_parser: type | None = None  # chat.tool_parsers.ToolParser subclass for this model
    think_markers: object | None = None  # chat.reasoning.ThinkMarkers when the model reasons
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

    def __post_init__(self) -> None:
        # llama-server's --alias renames the served model: the first alias is its id and what answers report.
        self.own_name = self.model_name
        if self.config.alias:
            self.model_name = self.config.alias[0]
        self.served.default, self.served.strict = self.config.default_model, self.config.strict_model_names

    @property
    def ready(self) -> bool:
        return self.engine is not None or self.served.loaded

    def require_engine(self) -> AsyncEngine:
        if self.engine is None:
            if self.served.loaded:
                self.served.pick(None, CHAT)  # no chat model here: a 400 that says so
            raise ServiceUnavailable("the model is still loading; retry shortly", code="loading",
                                     headers={"Retry-After": "2"})
        return self.engine

    @property
    def sampling_defaults(self) -> dict:
        """What requests that leave sampling fields unset run with (--temp, --seed, ...)."""
        return server_sampling(self.config)

    @property
    def served_names(self) -> list[str]:
        """The chat model's names: its id first, then the other aliases and its own name."""
        return list(dict.fromkeys([self.model_name, *self.config.alias, self.own_name]))

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
                f"model {requested!r} is not served here; this server serves {', '.join(map(repr, self.served_names))}",
                param="model", code="model_not_found",
            )


def get_state(request: Request) -> ServerState:
    return request.app.state.inferd
