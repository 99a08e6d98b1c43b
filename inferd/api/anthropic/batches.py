"""Anthropic's Message Batches: a list of Messages requests, each with a
custom_id, run later at low priority; results as JSONL with one result per
request (succeeded, errored, canceled, expired). Kept and run by the job
plane (`inferd.jobs`); this module speaks Anthropic's shapes and envelope."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, ValidationError

from inferd.api.anthropic.errors import AnthropicRoute
from inferd.api.anthropic.protocol import MessagesRequest
from inferd.api.job_access import caller, get_plane, job_owner, owner_limits, owner_scopes, page_limit
from inferd.http.errors import BadRequest, NotFound, validation_message
from inferd.jobs.plane import JobPlane
from inferd.jobs.runner import JobKind
from inferd.jobs.store import Item, Job, new_id

router = APIRouter(route_class=AnthropicRoute)

ENDPOINT = "/v1/messages"
WINDOW = 24 * 3600.0
MAX_REQUESTS = 100_000
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
STATUS = {"cancelling": "canceling", "completed": "ended", "failed": "ended", "expired": "ended", "cancelled": "ended"}


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    custom_id: str
    params: dict


class CreateMessageBatch(BaseModel):
    requests: list[BatchRequest]


def iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z") if t is not None else None


def batch_object(job: Job, base_url: str) -> dict[str, Any]:
    status = STATUS.get(job.state, "in_progress")
    counts = job.counts
    ended = job.times.get(f"{job.state}_at") if status == "ended" else None
    return {
        "id": job.id, "type": "message_batch", "processing_status": status,
        "request_counts": {"processing": counts.get("pending", 0), "succeeded": counts.get("succeeded", 0),
                           "errored": counts.get("errored", 0), "canceled": counts.get("canceled", 0),
                           "expired": counts.get("expired", 0)},
        "ended_at": iso(ended), "created_at": iso(job.created_at), "expires_at": iso(job.expires_at),
        "archived_at": None, "cancel_initiated_at": iso(job.times.get("cancelling_at")),
        "results_url": f"{base_url.rstrip('/')}/v1/messages/batches/{job.id}/results" if status == "ended" else None,
    }


def checked_requests(body: CreateMessageBatch) -> list[tuple[str, dict]]:
    if not body.requests:
        raise BadRequest("requests: give at least one request", param="requests")
    if len(body.requests) > MAX_REQUESTS:
        raise BadRequest(f"requests: at most {MAX_REQUESTS} in one batch", param="requests")
    seen: dict[str, int] = {}
    items = []
    for i, request in enumerate(body.requests):
        where = f"requests.{i}"
        if not CUSTOM_ID.match(request.custom_id):
            raise BadRequest(f"{where}.custom_id: 1 to 64 letters, digits, '_' or '-', got {request.custom_id!r}",
                             param=f"{where}.custom_id")
        if request.custom_id in seen:
            raise BadRequest(f"{where}.custom_id: {request.custom_id!r} is already used by requests.{seen[request.custom_id]}; "
                             "every request needs its own", param=f"{where}.custom_id")
        seen[request.custom_id] = i
        try:
            params = MessagesRequest.model_validate(request.params)
        except ValidationError as error:
            message, param = validation_message(error)
            raise BadRequest(f"{where}.params: {message}", param=f"{where}.params.{param}" if param else None) from None
        if params.stream:
            raise BadRequest(f"{where}.params.stream: a batch request cannot stream", param=f"{where}.params.stream")
        items.append((request.custom_id, request.params))
    return items


async def find_batch(plane: JobPlane, id: str, owner: str) -> Job:
    job = await asyncio.to_thread(plane.store.get, id, owner)
    if job is None or job.kind != "message_batch":
        raise NotFound(f"message batch {id!r} not found")
    return job


@router.post("/v1/messages/batches")
async def create_batch(body: CreateMessageBatch, raw: Request, plane: JobPlane = Depends(get_plane),
                       owner: str = Depends(job_owner)):
    items = checked_requests(body)
    job = await asyncio.to_thread(plane.store.create, new_id("msgbatch_"), "message_batch", owner, ENDPOINT, {},
                                  state="in_progress", expires_at=time.time() + WINDOW, items=items, caller=caller(),
                                  scopes=owner_scopes(raw), limits=owner_limits(raw))
    plane.runner.wake()
    return batch_object(job, str(raw.base_url))


@router.get("/v1/messages/batches")
async def list_batches(raw: Request, after_id: str | None = None, before_id: str | None = None,
                       limit: int | None = Query(None), plane: JobPlane = Depends(get_plane),
                       owner: str = Depends(job_owner),
                       created_before: float | None = None, created_from: float | None = None):
    limit = page_limit(limit, default=20, most=1000)
    if after_id is not None and before_id is not None:
        raise BadRequest("send after_id or before_id, not both", param="before_id")
    jobs = await asyncio.to_thread(plane.store.list, owner, kinds=("message_batch",), after=after_id,
                                   before=before_id, limit=limit + 1, created_before=created_before,
                                   created_from=created_from)
    # Newest first either way; with before_id the extra job (for has_more) is the newest, left off.
    page = jobs[-limit:] if before_id is not None else jobs[:limit]
    data = [batch_object(j, str(raw.base_url)) for j in page]
    return {"data": data, "has_more": len(jobs) > limit, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


@router.get("/v1/messages/batches/{batch_id}")
async def retrieve_batch(batch_id: str, raw: Request, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    return batch_object(await find_batch(plane, batch_id, owner), str(raw.base_url))


@router.post("/v1/messages/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, raw: Request, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    job = await find_batch(plane, batch_id, owner)
    await plane.runner.cancel(job.id)  # an ended batch stays as it is, as Anthropic's does
    return batch_object(await find_batch(plane, batch_id, owner), str(raw.base_url))


@router.delete("/v1/messages/batches/{batch_id}")
async def delete_batch(batch_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    job = await find_batch(plane, batch_id, owner)
    if job.active:
        raise BadRequest(f"message batch {job.id} is still processing; cancel it and wait for it to end first")
    await asyncio.to_thread(plane.store.delete, job.id)
    return {"id": job.id, "type": "message_batch_deleted"}


@router.get("/v1/messages/batches/{batch_id}/results")
async def batch_results(batch_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    job = await find_batch(plane, batch_id, owner)
    if job.active:
        raise BadRequest(f"message batch {job.id} has not ended yet; its results are ready when processing_status "
                         "is 'ended'")
    items = await asyncio.to_thread(plane.store.items, job.id)
    text = "".join(json.dumps(result_line(i)) + "\n" for i in items)
    return Response(text, media_type="application/x-jsonl")


def result_line(item: Item) -> dict:
    if item.state == "succeeded":
        result = {"type": "succeeded", "message": item.response}
    elif item.state == "errored":
        result = {"type": "errored", "error": item.response}
    else:
        result = {"type": item.state}  # canceled, expired
    return {"custom_id": item.custom_id, "result": result}


def job_kind() -> JobKind:
    return JobKind()
