"""The model store as the dialects see it: the server's store (its --data-dir),
the stored models read off the event loop, which of them this process serves,
and the store's errors as HTTP errors. Used by /v1/models and Ollama's
/api/tags, /api/show, /api/pull, /api/delete and /api/copy."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TypeVar

from inferd.http.errors import APIError, BadRequest, HTTPStatusError, NotFound, to_api_error
from inferd.model_store import (BadModelName, IntegrityError, Manifest, ModelName, ModelNotStored, ModelStore,
                                NotEnoughSpace, Refused, StoreError)
from inferd.model_store.hub import HubError, RepoNotFound
from inferd.serving.state import ServerState

T = TypeVar("T")


def store_of(state: ServerState) -> ModelStore:
    return _store(state.config.data_dir)


@functools.lru_cache(maxsize=8)
def _store(data_dir: str | None) -> ModelStore:
    return ModelStore.open(data_dir)


async def in_store(state: ServerState, work: Callable[[ModelStore], T]) -> T:
    """`work(store)` on a worker thread (manifests are files; the first use records the bundled
    model), its store errors as HTTP errors."""
    try:
        return await asyncio.to_thread(work, store_of(state))
    except (StoreError, ValueError) as error:
        raise as_api_error(error) from None


def served_name(state: ServerState, manifest: Manifest) -> str | None:
    """The name this process serves `manifest` under, if it does (by name: a request
    for that name reaches the loaded model)."""
    names = set(state.served_names)
    name = manifest.model_name
    return next((n for n in (name.short, name.full) if n in names), None)


def unserved(state: ServerState, manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if served_name(state, m) is None]


def served_capabilities(state: ServerState) -> list[str]:
    found = ["completion", "chat"]
    if state.tool_parser is not None:
        found.append("tools")
    return found


def as_api_error(error: Exception) -> APIError:
    if isinstance(error, APIError):
        return error
    message = str(error)
    if isinstance(error, (ModelNotStored, RepoNotFound)):
        return NotFound(message, param="model", code="model_not_found")
    if isinstance(error, (BadModelName, Refused)):
        return BadRequest(message, param="model")
    if isinstance(error, NotEnoughSpace):
        return HTTPStatusError(507, message)
    if isinstance(error, (HubError, IntegrityError)):
        return HTTPStatusError(502, message)  # the hub failed us, or sent other bytes than it promised
    if isinstance(error, StoreError):
        return HTTPStatusError(500, message)  # the store's own fault; the message names the file
    return to_api_error(error)  # a ValueError is the client's (400); anything else is logged, a plain 500


def parse_name(text: str, param: str = "model") -> ModelName:
    try:
        return ModelName.parse(text)
    except BadModelName as error:
        raise BadRequest(str(error), param=param) from None
