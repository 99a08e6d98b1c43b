"""Which models this process serves and what each can do: the one place that
knows. A chat model generates through the engine; a pooled model
(`engine.embedding.model.PooledModel`) computes embeddings or rerank scores; a
chat model served with --pooling does both.

Requests name a model and a task; `pick` answers with the model or an error
that says what to change (404 for a name served nowhere here, 400 for a model
that cannot do the task)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass

from inferd.engine.embedding.model import PooledModel
from inferd.http.errors import BadRequest, NotFound, ServiceUnavailable

CHAT, EMBED, RERANK = "chat", "embed", "rerank"
_VERBS = {CHAT: "generate text", EMBED: "compute embeddings", RERANK: "rerank documents"}
_HOW = {
    CHAT: "chat and completions need a chat model (inferd serve --model)",
    EMBED: "serve one beside the chat model with --embedding-model (all-minilm-l6-v2 is bundled), "
           "or pool the chat model's hidden states with --pooling mean|last",
    RERANK: "serve a cross-encoder or an embedding model with --embedding-model",
}


@dataclass
class ServedModel:
    name: str
    tasks: frozenset[str]
    aliases: tuple[str, ...] = ()
    pooled: PooledModel | None = None  # how it embeds or scores
    encoder: object | None = None  # an encoder's models.encoder_loader.LoadedEncoder (what /api/ps reports)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# A model loaded on demand (serving.model_host) that this request holds a lease on; `pick` answers it.
_LEASED: ContextVar[ServedModel | None] = ContextVar("inferd_leased_model", default=None)


def choose_leased(model: ServedModel | None) -> None:
    """Route what runs in this context (one request) to `model`, loaded on demand for it."""
    _LEASED.set(model)


class ServedModels:
    def __init__(self) -> None:
        self.models: list[ServedModel] = []
        # The models this process loads on demand, (name, tasks) each: named in a 404, loaded by
        # server.model_select before the route runs.
        self.on_demand: Callable[[], list[tuple[str, list[str]]]] = lambda: []
        # How many models someone chose load on demand, of any kind (the one-model rule counts them).
        self.hosted: Callable[[], int] = lambda: 0
        self.loaded = False  # every model is in; until then a missing task may still be loading
        self.default: str | None = None  # --default-model: serves requests naming a model served nowhere here
        self.strict = False  # --strict-model-names: no fallback, not even to the one model served

    def add(self, model: ServedModel) -> None:
        self.models = [m for m in self.models if m.name != model.name] + [model]

    def named(self, name: str) -> ServedModel | None:
        return next((m for m in self.models if name in m.names), None)

    def meant(self, name: str) -> ServedModel | None:
        """The model a request naming `name` goes to: the one of that name, else
        --default-model, else (unless --strict-model-names) the only model served.
        Clients send their own defaults (gpt-4o, claude-..., test) to one-model servers.
        "Only" counts every model: chat and embedding ones loaded at start and those
        loaded on demand (further --model models, the store's, less the bundled one every
        store lists); with two, a name must mean one."""
        model = self.named(name)
        if model is not None or self.strict:
            return model
        if self.default is not None:
            return self.named(self.default)
        return self.models[0] if len(self.models) == 1 and not self.hosted() else None

    def able(self, *tasks: str) -> list[ServedModel]:
        return [m for m in self.models if m.tasks & set(tasks)]

    @property
    def serves_chat(self) -> bool:
        return bool(self.able(CHAT))

    def pick(self, requested: str | None, *tasks: str) -> ServedModel:
        """The model a request means for the first of `tasks` it can do:
        the one it names, or without a name the first able one."""
        if not self.loaded:
            raise ServiceUnavailable("the model is still loading; retry shortly", code="loading",
                                     headers={"Retry-After": "2"})
        if requested:
            leased = _LEASED.get()
            mine = leased is not None and (requested in leased.names or requested.removesuffix(":latest") in leased.names)
            model = leased if mine else self.meant(requested)  # Ollama's default tag found the leased model too
            if model is None:
                listing = ", ".join([_listing(self.models), *(f"{n!r} ({', '.join(t)})" for n, t in self.on_demand())])
                raise NotFound(f"model {requested!r} is not served here; this server serves {listing}",
                               param="model", code="model_not_found")
            if not model.tasks & set(tasks):
                raise BadRequest(f"model {requested!r} cannot {_VERBS[tasks[0]]}: {self._instead(tasks)}",
                                 param="model", code="model_not_supported")
            return model
        able = self.able(*tasks)
        for task in tasks:
            for model in able:
                if task in model.tasks:
                    return model
        raise BadRequest(f"no model here can {_VERBS[tasks[0]]}: {self._instead(tasks)}", param="model",
                         code="model_not_supported")

    def _instead(self, tasks: Iterable[str]) -> str:
        able = self.able(*tasks)
        if able:
            return f"ask for {_listing(able)}"
        return _HOW[next(iter(tasks))]

    def describe(self) -> list[tuple[str, list[str]]]:
        """(name, tasks) of every model, for listings."""
        return [(m.name, sorted(m.tasks)) for m in self.models]

    def close(self) -> None:
        for model in self.models:
            if model.pooled is not None:
                model.pooled.close()


def _listing(models: Iterable[ServedModel]) -> str:
    return ", ".join(f"{m.name!r} ({', '.join(sorted(m.tasks))})" for m in models)
