"""GET /v1/models and /v1/models/{id}: the served models (loaded) and every
stored one (not loaded), each with what it can do."""

from __future__ import annotations

from datetime import datetime

from inferd.api.openai.protocol import ModelCard, ModelList
from inferd.api.stored_models import in_store, served_capabilities, unserved
from inferd.http.errors import NotFound
from inferd.model_store import BadModelName, Manifest, ModelName
from inferd.serving.state import ServerState

_TASKS = {"chat": ["completion", "chat"], "embed": ["embeddings"], "rerank": ["rerank"]}


async def list_models(state: ServerState, served: list[ModelCard]) -> ModelList:
    for card in served:
        card.loaded = True
        card.capabilities = _capabilities(state, card.id)
        card.aliases = _other_names(card.id, _served_names(state, card.id))
    known = {card.id for card in served}
    stored = await in_store(state, lambda store: store.models())
    extra = [stored_card(m) for m in unserved(state, stored) if m.model_name.short not in known]
    return ModelList(data=served + extra + _on_demand(state, known | {c.id for c in extra}, extra))


def _on_demand(state: ServerState, listed: set[str], stored: list[ModelCard]) -> list[ModelCard]:
    """Marks the stored models loaded on demand as loaded; cards for the further --model models."""
    host = state.host
    if host is None:
        return []
    loaded = {n for m in host.loaded() for n in m.names}
    ids = {card.id for card in stored}
    for card in stored:
        card.loaded = card.id in loaded
        hosted = host.find(card.id)
        if hosted is None:
            continue
        if hosted.name not in ids:  # `--model NAME --alias A`: A is its id, as answers name it
            card.id = hosted.name
            ids.add(hosted.name)
        card.aliases = _other_names(card.id, hosted.names)
        if hosted.kind != "chat":  # what the server makes of it: a cross-encoder stored as "embeddings" reranks
            card.capabilities = list(_TASKS[hosted.kind])
    return [ModelCard(id=m.name, created=int(state.started), owned_by="inferd", loaded=m.name in loaded,
                      capabilities=list(_TASKS[m.kind]), aliases=_other_names(m.name, m.names))
            for m in host.models if m.name not in listed | ids]


def _served_names(state: ServerState, name: str) -> list[str]:
    if name == state.model_name:
        return state.served_names
    served = getattr(state, "served", None)
    model = served.named(name) if served is not None and hasattr(served, "named") else None
    return list(model.names) if model is not None else []


def _other_names(name: str, names) -> list[str] | None:
    """The names besides `name` that a request may give for the model (none: null)."""
    every = {name, *names}
    # "x:latest" is x (Ollama's default tag), which any client may send: not another name.
    others = [n for n in dict.fromkeys(names) if n != name and n.removesuffix(":latest") not in every - {n}]
    return others or None


def find_model(cards: list[ModelCard], model_id: str) -> ModelCard:
    for card in cards:
        if card.id == model_id or _same_name(card.id, model_id) or model_id in (card.aliases or ()):
            return card
    raise NotFound(f"model {model_id!r} does not exist here; GET /v1/models lists the served and stored models",
                   param="model", code="model_not_found")


def stored_card(m: Manifest) -> ModelCard:
    created = int(datetime.fromisoformat(m.created_at.replace("Z", "+00:00")).timestamp())
    owner = m.name.split("/")[0] if "/" in m.name else "inferd"
    return ModelCard(id=m.model_name.short, created=created, owned_by=owner, max_model_len=m.context_length,
                     loaded=False, capabilities=list(m.capabilities))


def _capabilities(state: ServerState, name: str) -> list[str]:
    served = getattr(state, "served", None)  # what each served model can do, where the server says
    model = served.named(name) if served is not None and hasattr(served, "named") else None
    if model is None or not getattr(model, "tasks", None):
        return served_capabilities(state)
    found = [c for task in sorted(model.tasks) for c in _TASKS.get(task, [task])]
    if "chat" in found and state.tool_parser is not None:
        found.append("tools")
    return found


def _same_name(a: str, b: str) -> bool:
    try:
        return ModelName.parse(a) == ModelName.parse(b)
    except BadModelName:
        return False
