"""The job plane itself, one view over every kind of work that outlives a
connection (OpenAI batches, Anthropic message batches, background
responses): list (newest first, by kind and state), retrieve, cancel, and
each job's events (created, started, progress, finished, with times); and,
for a router, the tokens owed by the callers it made jobs for."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Depends, Query

from inferd.api.job_access import get_plane, job_owner, page_limit
from inferd.http.auth import Forbidden
from inferd.http.errors import BadRequest, NotFound
from inferd.http.request_context import current_request
from inferd.jobs.plane import JobPlane
from inferd.jobs.store import ACTIVE, TERMINAL, Job

router = APIRouter()

KINDS = ("batch", "message_batch", "response")
CHARGES_PATH = "/v1/job-charges/claim"  # worker to router only: never forwarded


def job_object(job: Job) -> dict:
    counts = {state: job.counts.get(state, 0) for state in ("pending", "succeeded", "errored", "canceled", "expired")}
    return {"id": job.id, "object": "job", "kind": job.kind, "state": job.state, "endpoint": job.endpoint,
            "created_at": job.created_at, "expires_at": job.expires_at, "times": job.times,
            "request_counts": {"total": job.total, **counts}, "result": job.result}


async def find_job(plane: JobPlane, id: str, owner: str) -> Job:
    job = await asyncio.to_thread(plane.store.get, id, owner)
    if job is None:
        raise NotFound(f"no job with id {id!r}", code="job_not_found")
    return job


@router.get("/v1/jobs")
async def list_jobs(kind: str | None = None, state: str | None = None, after: str | None = None,
                    limit: int | None = Query(None), plane: JobPlane = Depends(get_plane),
                    owner: str = Depends(job_owner),
                    created_before: float | None = None, created_from: float | None = None):
    if kind is not None and kind not in KINDS:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}, got {kind!r}", param="kind")
    if state is not None and state not in ACTIVE + TERMINAL:
        raise BadRequest(f"state must be one of {', '.join(ACTIVE + TERMINAL)}, got {state!r}", param="state")
    limit = page_limit(limit)
    jobs = await asyncio.to_thread(plane.store.list, owner, kinds=(kind,) if kind else (), state=state, after=after,
                                   limit=limit + 1, created_before=created_before, created_from=created_from)
    data = [job_object(j) for j in jobs[:limit]]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(jobs) > limit}


@router.get("/v1/jobs/{job_id}")
async def retrieve_job(job_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    return job_object(await find_job(plane, job_id, owner))


@router.post("/v1/jobs/{job_id}/cancel")
async def cancel_job(job_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    job = await find_job(plane, job_id, owner)
    await plane.runner.cancel(job.id)
    return job_object(await find_job(plane, job_id, owner))


@router.get("/v1/jobs/{job_id}/events")
async def job_events(job_id: str, after: int = 0, limit: int | None = Query(None), plane: JobPlane = Depends(get_plane),
                     owner: str = Depends(job_owner)):
    job = await find_job(plane, job_id, owner)
    limit = page_limit(limit, default=100, most=1000)
    events = await asyncio.to_thread(plane.store.events, job.id, after, limit + 1)
    return {"object": "list", "data": events[:limit], "has_more": len(events) > limit}


@router.post(CHARGES_PATH, include_in_schema=False)
async def claim_charges(limit: int | None = Query(None), plane: JobPlane = Depends(get_plane)):
    """For a router: the tokens items of jobs made on a caller's behalf used, each handed out once
    (and forgotten here), to be charged to that caller in the router's ledger. Admin keys only."""
    ctx = current_request()
    if ctx is not None and ctx.key is not None and not ctx.key.admin:
        raise Forbidden(f"only an admin key (a router's --worker-api-key) may claim job charges; {ctx.key.name!r} "
                        "is not one", code="admin_only")
    limit = page_limit(limit, default=1000, most=10000)
    charges = await asyncio.to_thread(plane.store.claim_charges, limit)
    return {"object": "list", "data": [dataclasses.asdict(c) for c in charges], "has_more": len(charges) == limit}
