"""Ollama's model routes over the store: GET /api/tags lists every stored
model beside the served one, POST /api/show answers for a stored model too,
DELETE /api/delete and POST /api/copy change the store."""

from __future__ import annotations

from inferd.api.ollama import info
from inferd.api.ollama.model_card import parameter_size
from inferd.api.ollama.models import DEFAULT_TAG
from inferd.api.ollama.protocol import CopyRequest, DeleteRequest, ShowRequest
from inferd.api.stored_models import in_store, parse_name, unserved
from inferd.http.errors import BadRequest
from inferd.model_store import Manifest
from inferd.serving.state import ServerState

_CAPABILITIES = {"embeddings": "embedding"}  # Ollama's word for it; "chat" is implied by completion


async def tags(state: ServerState) -> dict:
    stored = await in_store(state, lambda store: store.models())
    return {"models": info.tags(state)["models"] + [summary(m) for m in unserved(state, stored)]}


async def show(state: ServerState, req: ShowRequest) -> dict:
    requested = req.requested()
    if not requested:
        raise BadRequest("model is required", param="model")
    if requested.removesuffix(DEFAULT_TAG) in state.served_names:
        return info.show(state, req)
    name = parse_name(requested)
    manifest = await in_store(state, lambda store: store.require(name))
    return shown(manifest)


async def delete(state: ServerState, req: DeleteRequest) -> None:
    if not req.requested():
        raise BadRequest("model is required", param="model")
    name = parse_name(req.requested())
    await in_store(state, lambda store: store.remove(name))


async def copy(state: ServerState, req: CopyRequest) -> None:
    source, destination = parse_name(req.source, "source"), parse_name(req.destination, "destination")
    await in_store(state, lambda store: store.copy(source, destination))


def details(m: Manifest) -> dict:
    family = m.architecture or ""
    return {"parent_model": "", "format": m.format, "family": family, "families": [family] if family else [],
            "parameter_size": parameter_size(m.parameter_count) if m.parameter_count else "",
            "quantization_level": m.quantization or ""}


def summary(m: Manifest) -> dict:
    return {"name": m.model_name.full, "model": m.model_name.full, "modified_at": m.created_at, "size": m.size,
            "digest": m.digest, "details": details(m)}


def shown(m: Manifest) -> dict:
    arch = m.architecture or "unknown"
    model_info = {"general.architecture": arch, "general.parameter_count": m.parameter_count}
    if m.context_length:
        model_info[f"{arch}.context_length"] = m.context_length
    capabilities = [_CAPABILITIES.get(c, c) for c in m.capabilities if c != "chat"]
    return {"modelfile": f"FROM {m.model_name.full}\n", "parameters": "", "template": "",
            "license": m.license or "", "details": details(m), "model_info": model_info,
            "capabilities": capabilities, "modified_at": m.created_at}
