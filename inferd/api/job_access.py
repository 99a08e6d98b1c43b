"""What every job route needs: the server's job plane and who is asking
(the key's name; "" on a server without keys). A key sees only its own
files and jobs: anyone else's answer as not found."""

from __future__ import annotations

from fastapi import Request

from inferd.http.errors import BadRequest, NotFound
from inferd.http.request_context import current_request
from inferd.jobs.plane import JobPlane


def get_plane(request: Request) -> JobPlane:
    plane = getattr(request.app.state, "jobs", None)
    if plane is None or plane.runner is None:
        raise NotFound("this server keeps no jobs (it was started without a data dir for them)", code="jobs_disabled")
    return plane


def owner() -> str:
    ctx = current_request()
    return ctx.key.name if ctx is not None and ctx.key is not None else ""


def page_limit(limit: int | None, default: int = 20, most: int = 100) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= most:
        raise BadRequest(f"limit must be between 1 and {most}, got {limit}", param="limit")
    return limit
