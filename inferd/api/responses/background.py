"""Background responses: `background: true` answers at once with a stored
response in status "queued"; the job plane runs the request later (a job
whose id is the response's) and the stored response follows it:
in_progress when it starts, then completed (stored by the Responses route
itself, under the same id), failed with the error, or cancelled."""

from __future__ import annotations

import asyncio
import time

from fastapi import Request

from inferd.api.job_access import caller, get_plane, owner_limits, owner_of, owner_scopes
from inferd.api.responses.protocol import ResponsesRequest
from inferd.http.errors import BadRequest
from inferd.jobs.plane import JobPlane
from inferd.jobs.runner import JobKind
from inferd.jobs.store import Item, ItemResult, Job
from inferd.serving.state import ServerState
from inferd.store.responses import ResponseStore

ENDPOINT = "/v1/responses"
WAIT_FOR_CANCEL = 5.0


def check(req: ResponsesRequest) -> None:
    if req.stream:
        raise BadRequest("stream and background cannot be used together: poll GET /v1/responses/{id} for a "
                         "background response, or drop background to stream", param="background")
    if not req.store:
        raise BadRequest("background requires store: a background response is kept so it can be retrieved",
                         param="store")


async def queue(state: ServerState, req: ResponsesRequest, raw: Request, response_id: str, queued: dict) -> dict:
    """Stores the queued response and its job; returns the response as the client sees it now."""
    plane = get_plane(raw)
    owner, scopes, limits = owner_of(raw), owner_scopes(raw), owner_limits(raw)
    store = state.responses_store
    if store is None:
        raise BadRequest("this server keeps no responses, so it cannot run one in the background", param="background")
    body = req.model_dump(by_alias=True, exclude_none=True)
    body["background"] = False
    queued = {**queued, "background": True}
    await asyncio.to_thread(store.put, response_id, body, queued, [])
    await asyncio.to_thread(plane.store.create, response_id, "response", owner, ENDPOINT, {}, state="queued",
                            items=[(response_id, body)], caller=caller(),
                            scopes=scopes, limits=limits)
    plane.runner.wake()
    return queued


async def cancel(plane: JobPlane, id: str, owner: str) -> bool:
    """Stops `owner`'s background response that has not ended; False when `id` is not one."""
    job = await asyncio.to_thread(plane.store.get, id, owner)
    if job is None or job.kind != "response":
        return False
    if await plane.runner.cancel(id):
        await plane.runner.wait(id, WAIT_FOR_CANCEL)
    return True


def job_kind(store: ResponseStore) -> JobKind:
    def update(id: str, **changes) -> None:
        stored = store.get(id)
        if stored is not None:
            store.put(id, stored.request, {**stored.response, **changes}, stored.messages)

    async def started(job: Job, item: Item) -> None:
        await asyncio.to_thread(update, job.id, status="in_progress")

    async def done(job: Job, item: Item, result: ItemResult) -> None:
        if result.state == "succeeded":
            await asyncio.to_thread(update, job.id, background=True)  # stored by the route, under this id
            return
        error = (result.body or {}).get("error") or {}
        await asyncio.to_thread(update, job.id, status="failed", error={
            "code": error.get("code") or error.get("type") or "server_error",
            "message": error.get("message") or f"the response failed (HTTP {result.status_code})"})

    async def finish(job: Job) -> dict:
        if job.cancel_requested and job.counts.get("succeeded", 0) == 0:
            await asyncio.to_thread(update, job.id, status="cancelled", cancelled_at=int(time.time()))
        return {}

    return JobKind(started=started, done=done, finish=finish, shares_slots=False)
