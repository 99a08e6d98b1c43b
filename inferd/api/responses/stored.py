"""Stored responses: the chain a previous_response_id names, and the
retrieve / delete / cancel operations on one stored response."""

from __future__ import annotations

import asyncio

from inferd.api.responses.convert import output_messages
from inferd.api.responses.protocol import DeletedResponse
from inferd.http.errors import NotFound
from inferd.serving.state import ServerState
from inferd.store.responses import StoredResponse


def _not_found(id: str, param: str | None = None, code: str | None = None) -> NotFound:
    return NotFound(f"Response with id '{id}' not found.", param=param, code=code)


async def find(state: ServerState, id: str) -> StoredResponse | None:
    store = state.responses_store
    return None if store is None else await asyncio.to_thread(store.get, id)


async def chain_messages(state: ServerState, previous_id: str | None) -> list[dict]:
    """The conversation up to and including a stored response, as chat messages."""
    if previous_id is None:
        return []
    stored = await find(state, previous_id)
    if stored is None:
        raise _not_found(previous_id, "previous_response_id", "previous_response_not_found")
    return stored.messages + output_messages(stored.response["output"])


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


async def cancel(state: ServerState, id: str) -> dict:
    # Responses run to completion within their request, so a stored one has
    # always finished: cancelling it leaves it as it is, as OpenAI does.
    return await retrieve(state, id)
