"""OpenAI's Files API: upload (multipart, up to --max-file-size), list,
retrieve, download and delete. Batch inputs are uploaded here and batch
outputs are read from here. A key sees only its own files. A file may
expire (`expires_after`, seconds after it was made; batch inputs after 30
days unless told): it is gone from then on, and its bytes are deleted."""

from __future__ import annotations

import asyncio
from typing import Literal

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import Response

from inferd.api.job_access import get_plane, job_owner, page_limit
from inferd.http.errors import BadRequest, NotFound, PayloadTooLarge
from inferd.jobs.files import FileTooLarge
from inferd.jobs.plane import JobPlane
from inferd.jobs.store import FileRecord

router = APIRouter()

UPLOADABLE = ("batch", "user_data")
EXPIRY_RANGE = (3600, 30 * 24 * 3600)  # the seconds an expiry may name: an hour to 30 days
DEFAULT_EXPIRY = {"batch": 30 * 24 * 3600}  # by purpose; others are kept until deleted


def expiry_seconds(anchor: str | None, seconds: str | int | None, param: str) -> int | None:
    """An `expires_after` policy's seconds (anchored at the file's creation), or None when none was given."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise BadRequest(f"{param}[anchor] must be 'created_at', got {anchor!r}", param=f"{param}.anchor")
    low, high = EXPIRY_RANGE
    try:
        value = int(seconds)
    except (TypeError, ValueError):
        value = None
    if value is None or not low <= value <= high:
        raise BadRequest(f"{param}[seconds] must be a whole number of seconds from {low} (an hour) to {high} (30 days), "
                         f"got {seconds!r}", param=f"{param}.seconds")
    return value


def safe_name(filename: str | None) -> str:
    """The upload's own name, without folders, quotes or control characters (it goes into a header)."""
    name = "".join(c for c in (filename or "").replace("\\", "/").rsplit("/", 1)[-1] if c.isprintable() and c != '"')
    return name[:255] or "upload"


def file_object(record: FileRecord) -> dict:
    return {"id": record.id, "object": "file", "bytes": record.bytes, "created_at": int(record.created_at),
            "filename": record.filename, "purpose": record.purpose, "status": "processed",
            "expires_at": int(record.expires_at) if record.expires_at is not None else None,
            "status_details": None, "sha256": record.sha256}


def find_file(plane: JobPlane, id: str, owner: str, param: str | None = None) -> FileRecord:
    record = plane.store.file(id, owner)
    if record is None:
        raise NotFound(f"No such File object: {id}", param=param, code="file_not_found")
    return record


@router.post("/v1/files")
async def upload_file(file: UploadFile = File(...), purpose: str = Form(...),
                      anchor: str | None = Form(None, alias="expires_after[anchor]"),
                      seconds: str | None = Form(None, alias="expires_after[seconds]"),
                      plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    if purpose not in UPLOADABLE:
        raise BadRequest(f"purpose must be one of {', '.join(UPLOADABLE)}, got {purpose!r}", param="purpose")
    expires = expiry_seconds(anchor, seconds, "expires_after")
    if expires is None:
        expires = DEFAULT_EXPIRY.get(purpose)
    name = safe_name(file.filename)
    try:
        record = await asyncio.to_thread(plane.files.save, file.file, owner, purpose, name, plane.max_file_size,
                                         expires)
    except FileTooLarge as error:
        raise PayloadTooLarge(f"upload exceeds {error.limit} bytes (--max-file-size)") from None
    return file_object(record)


@router.get("/v1/files")
async def list_files(purpose: str | None = None, limit: int | None = Query(None), after: str | None = None,
                     order: Literal["asc", "desc"] = "desc", plane: JobPlane = Depends(get_plane),
                     owner: str = Depends(job_owner),
                     created_before: float | None = None, created_from: float | None = None):
    limit = page_limit(limit, default=10000, most=10000)
    records = await asyncio.to_thread(plane.store.files, owner, purpose, after, limit + 1, order == "desc",
                                      created_before, created_from)
    data = [file_object(r) for r in records[:limit]]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(records) > limit}


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    return file_object(find_file(plane, file_id, owner))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    record = find_file(plane, file_id, owner)
    data = await asyncio.to_thread(plane.files.read, record.id)
    return Response(data, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{record.filename}"'})


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, plane: JobPlane = Depends(get_plane), owner: str = Depends(job_owner)):
    record = find_file(plane, file_id, owner)
    await asyncio.to_thread(plane.files.delete, record.id)
    return {"id": record.id, "object": "file", "deleted": True}
