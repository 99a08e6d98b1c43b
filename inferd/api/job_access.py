"""What every job route needs: the server's job plane and who is asking.

The owner of a file or job is the key's name ("" on a server without keys),
and a key sees only its own: anyone else's answer as not found. A router in
front authenticates its callers with keys of its own and reaches the worker
with one worker key, so it names the caller in `x-inferd-on-behalf-of`, as a
gateway does. The worker takes that name as the owner only from a key
allowed to speak for others (an admin key, such as the router's
--worker-api-key) or on a server without keys (open to all already); an
ordinary key that sends it is refused, so no client can read another's jobs
by naming them. The caller's model scopes come along
(`x-inferd-on-behalf-scopes`, a JSON list) and are kept with each job it
makes, so its items are held to them as the caller's own requests are, and
so are its rate limits (`x-inferd-on-behalf-limits`, a JSON object of
`Limits` fields): the items are admitted as that name, with those limits."""

from __future__ import annotations

import json

from fastapi import Request

from inferd.http.auth import Forbidden
from inferd.http.errors import BadRequest, NotFound
from inferd.http.request_context import current_request
from inferd.jobs.plane import JobPlane
from inferd.tenants.keys import LIMIT_FIELDS, NAME

ON_BEHALF_HEADER = "x-inferd-on-behalf-of"
ON_BEHALF_SCOPES = "x-inferd-on-behalf-scopes"
ON_BEHALF_LIMITS = "x-inferd-on-behalf-limits"


def get_plane(request: Request) -> JobPlane:
    plane = getattr(request.app.state, "jobs", None)
    if plane is None or plane.runner is None:
        raise NotFound("this server keeps no jobs (it was started without a data dir for them)", code="jobs_disabled")
    return plane


def caller() -> str:
    """The key that sent the request: it runs a job's items and is charged for them here."""
    ctx = current_request()
    return ctx.key.name if ctx is not None and ctx.key is not None else ""


async def job_owner(request: Request) -> str:
    """Whose files and jobs the request sees and makes: the caller's, or the one a trusted key speaks for.
    (A route's dependency; async, so it reads the request's context where the route runs.)"""
    return owner_of(request)


def owner_of(request: Request) -> str:
    """`job_owner` for code that holds the request."""
    named = request.headers.get(ON_BEHALF_HEADER)
    if named is None:
        return caller()
    ctx = current_request()
    key = ctx.key if ctx is not None else None
    if key is not None and not key.admin:
        raise Forbidden(f"{ON_BEHALF_HEADER} may be sent only with an admin key (a router's --worker-api-key); "
                        f"API key {key.name!r} is not one: leave the header out", code="on_behalf_not_allowed")
    named = named.strip()
    if not NAME.match(named):
        raise BadRequest(f"{ON_BEHALF_HEADER} must be a key name (1-64 of A-Z a-z 0-9 . _ -), got {named[:80]!r}",
                         param=ON_BEHALF_HEADER)
    return named


def owner_scopes(request: Request) -> tuple[str, ...]:
    """The models the owner may use, when a trusted key speaks for it and says (none: any)."""
    if request.headers.get(ON_BEHALF_SCOPES) is None:
        return ()
    owner_of(request)  # refused unless the key may speak for others
    try:
        scopes = json.loads(request.headers[ON_BEHALF_SCOPES])
    except ValueError:
        scopes = None
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise BadRequest(f"{ON_BEHALF_SCOPES} must be a JSON list of model names", param=ON_BEHALF_SCOPES)
    return tuple(scopes)


def owner_limits(request: Request) -> dict | None:
    """The owner's rate limits, when a trusted key speaks for it and says (None: the caller's own)."""
    if request.headers.get(ON_BEHALF_LIMITS) is None:
        return None
    owner_of(request)  # refused unless the key may speak for others
    try:
        limits = json.loads(request.headers[ON_BEHALF_LIMITS])
    except ValueError:
        limits = None
    if not isinstance(limits, dict) or not all(
            k in LIMIT_FIELDS and type(v) is int and v >= 0 for k, v in limits.items()):
        raise BadRequest(f"{ON_BEHALF_LIMITS} must be a JSON object of non-negative integers among "
                         f"{', '.join(LIMIT_FIELDS)}", param=ON_BEHALF_LIMITS)
    return limits


def page_limit(limit: int | None, default: int = 20, most: int = 100) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= most:
        raise BadRequest(f"limit must be between 1 and {most}, got {limit}", param="limit")
    return limit
