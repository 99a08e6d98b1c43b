"""OpenAI's Batch API: a JSONL file of requests to one endpoint, run later at
low priority, answered as an output file (and an error file) keyed by
custom_id. The job plane (`inferd.jobs`) keeps and runs it; this module
speaks OpenAI's shapes: the batch object, its status lifecycle
(validating -> in_progress -> finalizing -> completed; failed, expired,
cancelling, cancelled) and the output lines."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict

from inferd.api.job_access import caller, get_plane, job_owner, owner_limits, owner_scopes, page_limit
from inferd.api.openai.files import expiry_seconds, find_file
from inferd.http.errors import BadRequest, NotFound
from inferd.jobs.batch_input import parse_batch_input
from inferd.jobs.plane import JobPlane
from inferd.jobs.runner import InvalidInput, JobKind
from inferd.jobs.store import Item, Job, new_id

router = APIRouter()

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings")
WINDOWS = {"24h": 24 * 3600.0}
MAX_METADATA = 16


class CreateBatchRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    input_file_id: str
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None  # {anchor: created_at, seconds}: for the output files


def batch_object(job: Job) -> dict[str, Any]:
    def at(name: str) -> int | None:
        value = job.times.get(f"{name}_at")
        return int(value) if value is not None else None

    errors = job.result.get("errors")
    return {
        "id": job.id, "object": "batch", "endpoint": job.endpoint,
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": job.spec["input_file_id"], "completion_window": job.spec["completion_window"],
        "status": job.state, "output_file_id": job.result.get("output_file_id"),
        "error_file_id": job.result.get("error_file_id"), "created_at": int(job.created_at),
        "in_progress_at": at("in_progress"), "expires_at": int(job.expires_at) if job.expires_at else None,
        "finalizing_at": at("finalizing"), "completed_at": at("completed"), "failed_at": at("failed"),
        "expired_at": at("expired"), "cancelling_at": at("cancelling"), "cancelled_at": at("cancelled"),
        "request_counts": {"total": job.total, "completed": job.counts.get("succeeded", 0),
                           "failed": job.counts.get("errored", 0)},
        "metadata": job.spec.get("metadata") or None,
    }


async def find_batch(plane: JobPlane, id: str, owner: str) -> Job:
    job = await asyncio.to_thread(plane.store.get, id, owner)
    if job is None or job.kind != "batch":
        raise NotFound(f"No batch found with id '{id}'.", code="batch_not_found")
    return job


@router.post("/v1/batches")
async def create_batch(body: CreateBatchRequest, raw: Request, plane: JobPlane = Depends(get_plane),
                       owner: str = Depends(job_owner)):
    if body.endpoint not in ENDPOINTS:
        raise BadRequest(f"endpoint must be one of {', '.join(ENDPOINTS)}, got {body.endpoint!r}", param="endpoint")
    if body.completion_window not in WINDOWS:
        raise BadRequest(f"completion_window must be one of {', '.join(WINDOWS)}, got {body.completion_window!r}",
                         param="completion_window")
    if body.metadata is not None and len(body.metadata) > MAX_METADATA:
        raise BadRequest(f"metadata holds at most {MAX_METADATA} keys", param="metadata")
    policy = body.output_expires_after or {}
    output_expiry = expiry_seconds(policy.get("anchor"), policy.get("seconds"), "output_expires_after") \
        if body.output_expires_after is not None else None
    record = find_file(plane, body.input_file_id, owner, param="input_file_id")
    if record.purpose != "batch":
        raise BadRequest(f"file {record.id} has purpose {record.purpose!r}; upload the batch input with purpose "
                         "'batch'", param="input_file_id")
    spec = {"input_file_id": record.id, "completion_window": body.completion_window, "metadata": body.metadata,
            "output_expiry": output_expiry}
    expires = time.time() + WINDOWS[body.completion_window]
    job = await asyncio.to_thread(plane.store.create, new_id("batch_"), "batch", owner, body.endpoint, spec,
                                  expires_at=expires, caller=caller(),
                                  scopes=owner_scopes(raw), limits=owner_limits(raw))
    plane.runner.wake()
    return batch_object(job)


@router.get("/v1/batches")
async def list_batches(after: str | None = None, limit: int | None = Query(None), plane: JobPlane = Depends(get_plane),
                       owner: str = Depends(job_owner),
                       created_before: float | None = None, created_from: float | None = None):
    limit = page_limit(limit)
    jobs = await asyncio.to_thread(plane.store.list, owner, kinds=("batch",), after=after, limit=limit + 1,
                                   created_before=created_before, created_from=created_from)
    data = [batch_object(j) for j in jobs[:limit]]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(jobs) > limit}


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    return batch_object(await find_batch(plane, batch_id, owner))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    job = await find_batch(plane, batch_id, owner)
    if not await plane.runner.cancel(job.id):
        raise BadRequest(f"batch {job.id} has already ended ({job.state}); only a running batch can be cancelled",
                         code="batch_not_cancellable")
    return batch_object(await find_batch(plane, batch_id, owner))


# -- the job kind ---------------------------------------------------------------
def output_line(job: Job, item: Item) -> dict:
    line_id = f"batch_req_{job.id.removeprefix('batch_')}_{item.idx}"
    if item.status_code is None:  # never ran: cancelled or expired with its batch
        code = "batch_expired" if item.state == "expired" else "batch_cancelled"
        message = ("This request could not be executed before the completion window expired." if code == "batch_expired"
                   else "This request was not executed because the batch was cancelled.")
        return {"id": line_id, "custom_id": item.custom_id, "response": None, "error": {"code": code, "message": message}}
    return {"id": line_id, "custom_id": item.custom_id,
            "response": {"status_code": item.status_code, "request_id": item.request_id, "body": item.response},
            "error": None}


def job_kind(plane: JobPlane) -> JobKind:
    async def prepare(job: Job) -> list[tuple[str, dict]]:
        try:
            data = await asyncio.to_thread(plane.files.read, job.spec["input_file_id"])
        except FileNotFoundError:
            raise InvalidInput([{"code": "file_not_found", "message": "the input file was deleted before the batch "
                                 "ran", "param": "input_file_id", "line": None}]) from None
        items, errors = await asyncio.to_thread(parse_batch_input, data, job.endpoint)
        if errors:
            raise InvalidInput([e.as_dict() for e in errors])
        return items

    async def finish(job: Job) -> dict:
        items = await asyncio.to_thread(plane.store.items, job.id)
        good = [i for i in items if i.status_code is not None and i.status_code < 400]
        bad = [i for i in items if i.status_code is None or i.status_code >= 400]
        result = {}
        for name, chosen in (("output", good), ("error", bad)):
            if chosen:
                text = "".join(json.dumps(output_line(job, i)) + "\n" for i in chosen).encode()
                record = await asyncio.to_thread(plane.files.save_bytes, text, job.owner, "batch_output",
                                                 f"{job.id}_{name}.jsonl", job.spec.get("output_expiry"))
                result[f"{name}_file_id"] = record.id
        return result

    return JobKind(prepare=prepare, finish=finish)
