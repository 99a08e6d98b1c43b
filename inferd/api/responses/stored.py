"""Stored responses: the chain a previous_response_id names, and the
retrieve / delete / cancel operations on one stored response."""

from __future__ import annotations

import asyncio
import logging

from inferd.api.responses import background
from inferd.api.responses.convert import output_messages
from inferd.api.responses.protocol import DeletedResponse
from inferd.http.errors import APIError, NotFound
from inferd.jobs.plane import JobPlane
from inferd.serving.state import ServerState
from inferd.store.responses import StoredResponse, UnreadableResponse

log = logging.getLogger(__name__)


def _not_found(id: str, param: str | None = None, code: str | None = None) -> NotFound:
    return NotFound(f"Response with id '{id}' not found.", param=param, code=code)


async def find(state: ServerState, id: str) -> StoredResponse | None:
    """A stored response that cannot be read back is the server's fault: a 500
    naming it (the log says where and why; the client is told neither)."""
    store = state.responses_store
    if store is None:
        return None
    try:
        return await asyncio.to_thread(store.get, id)
    except UnreadableResponse as error:
        raise _unreadable(error) from None


def _unreadable(error: UnreadableResponse) -> APIError:
    log.error("%s", error)
    return APIError(f"the stored response '{error.id}' is unreadable (the server's store is damaged); "
                    "see the server log", code="stored_response_unreadable")


async def chain_messages(state: ServerState, previous_id: str | None) -> list[dict]:
    """The conversation up to and including a stored response, as chat messages."""
    if previous_id is None:
        return []
    stored = await find(state, previous_id)
    if stored is None:
        raise _not_found(previous_id, "previous_response_id", "previous_response_not_found")
    try:
        return stored.messages + output_messages(stored.response["output"])
    except (KeyError, TypeError, AttributeError) as error:
        store = state.responses_store
        raise _unreadable(UnreadableResponse(previous_id, store.path, f"its output does not read: {error!r}")) from None


async def save(state: ServerState, request: dict, response: dict, conversation: list[dict]) -> None:
    store = state.responses_store
    if store is not None:
        await asyncio.to_thread(store.put, response["id"], request, response, conversation)


async def retrieve(state: ServerState, id: str) -> dict:
    stored = await find(state, id)
    if stored is None:
        raise _not_found(id)
    return stored.response


async def delete(state: ServerState, id: str) -> DeletedResponse:
    store = state.responses_store
    if store is None or not await asyncio.to_thread(store.delete, id):
        raise _not_found(id)
    return DeletedResponse(id=id)


async def cancel(state: ServerState, id: str, plane: JobPlane | None = None, owner: str = "") -> dict:
    # A background response still queued or running is stopped (its engine
    # request aborted) and stored as cancelled. Any other has finished within
    # its request: cancelling it leaves it as it is, as OpenAI does.
    if plane is not None and plane.runner is not None:
        await background.cancel(plane, id, owner)
    return await retrieve(state, id)
