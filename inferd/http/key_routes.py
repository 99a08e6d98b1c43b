"""Managing API keys and reading usage, on `inferd serve` and `inferd router`
alike (both hold a `tenants.Tenants` on `app.state.tenants`):

    GET    /api/keys                  every key, redacted, with today's usage (admin)
    POST   /api/keys                  a new key; its secret is shown once (admin)
    PATCH  /api/keys/{name}           scopes, limits, admin, disabled, expiry (admin)
    POST   /api/keys/{name}/rotate    a new secret; the old one stops at once (admin)
    DELETE /api/keys/{name}           never the last admin key (admin)
    GET    /api/usage                 ?key=&model=&from=&to= (YYYY-MM-DD); a non-admin key sees its own

They sit under Ollama's /api prefix, so their errors use its envelope,
`{"error": "<message>"}`, as the door's 401s on these paths do: whatever
answers under /api answers in one shape.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from inferd.http.auth import Forbidden
from inferd.http.errors import APIError, BadRequest, NotFound, to_api_error
from inferd.http.request_context import current_request
from inferd.tenants.gate import Tenants
from inferd.tenants.keyring import KeyNotFound, LastAdminKey
from inferd.tenants.keys import ApiKey, InvalidField, changes_from, check_name
from inferd.tenants.limiter import utc_day
from inferd.tenants.store import USAGE_COUNTS, DuplicateKey

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")



class OllamaEnvelopeRoute(APIRoute):
    """Answers every error its routes raise as `{"error": "<message>"}`."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                err = to_api_error(exc)
                return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)

        return handle


router = APIRouter(route_class=OllamaEnvelopeRoute)


class Conflict(APIError):
    status, type = 409, "conflict_error"


def _tenants(request: Request) -> Tenants:
    tenants = getattr(request.app.state, "tenants", None)
    if tenants is None or not tenants.enabled:
        raise Forbidden("this server has no API keys, so keys cannot be managed: start it with --api-key "
                        "(or --api-key-file, INFERD_API_KEY) and use that admin key", code="keys_disabled")
    return tenants


def _caller() -> ApiKey:
    ctx = current_request()
    if ctx is None or ctx.key is None:  # the door lets nobody through without a key once keys exist
        raise Forbidden("this needs an API key", code="admin_required")
    return ctx.key


def _admin(request: Request) -> Tenants:
    tenants = _tenants(request)
    key = _caller()
    if not key.admin:
        raise Forbidden(f"managing keys needs an admin key; {key.name!r} is not one", code="admin_required")
    return tenants


async def _body(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _bad_field(e: InvalidField) -> BadRequest:
    return BadRequest(str(e), param=e.field, code="invalid_field")


def _listed(tenants: Tenants, key: ApiKey, today: dict) -> dict:
    body = key.public()
    body["last_used_at"] = tenants.ring.last_used(key)
    body["usage_today"] = today.get(key.name, dict.fromkeys(USAGE_COUNTS, 0))
    return body


@router.get("/api/keys")
async def list_keys(request: Request):
    tenants = _admin(request)
    today = await asyncio.to_thread(tenants.ledger.totals_by_key, utc_day(time.time()))
    return {"object": "list", "data": [_listed(tenants, k, today) for k in tenants.ring.all()]}


@router.post("/api/keys")
async def add_key(request: Request):
    tenants = _admin(request)
    body = await _body(request)
    try:
        name = check_name(body.get("name"))
        changes = changes_from(body, creating=True)
        changes.pop("name", None)
        key, secret = await asyncio.to_thread(tenants.ring.add, name, changes)
    except InvalidField as e:
        raise _bad_field(e) from None
    except DuplicateKey as e:
        raise Conflict(str(e), param="name", code="key_exists") from None
    return JSONResponse({**key.public(), "secret": secret}, status_code=201)


@router.patch("/api/keys/{name}")
async def update_key(name: str, request: Request):
    tenants = _admin(request)
    body = await _body(request)
    try:
        key = await asyncio.to_thread(tenants.ring.update, name, changes_from(body, creating=False))
    except InvalidField as e:
        raise _bad_field(e) from None
    except KeyNotFound as e:
        raise NotFound(str(e), code="key_not_found") from None
    except LastAdminKey as e:
        raise Conflict(str(e), code="last_admin_key") from None
    return key.public()


@router.post("/api/keys/{name}/rotate")
async def rotate_key(name: str, request: Request):
    tenants = _admin(request)
    try:
        key, secret = await asyncio.to_thread(tenants.ring.rotate, name)
    except InvalidField as e:
        raise _bad_field(e) from None
    except KeyNotFound as e:
        raise NotFound(str(e), code="key_not_found") from None
    return {**key.public(), "secret": secret}


@router.delete("/api/keys/{name}")
async def remove_key(name: str, request: Request):
    tenants = _admin(request)
    try:
        await asyncio.to_thread(tenants.ring.remove, name)
    except InvalidField as e:
        raise _bad_field(e) from None
    except KeyNotFound as e:
        raise NotFound(str(e), code="key_not_found") from None
    except LastAdminKey as e:
        raise Conflict(str(e), code="last_admin_key") from None
    return {"name": name, "deleted": True}


@router.get("/api/usage")
async def usage(request: Request):
    tenants = _tenants(request)
    caller = _caller()
    q = request.query_params
    key = q.get("key") or None
    if not caller.admin:
        if key is not None and key != caller.name:
            raise Forbidden(f"key {caller.name!r} may read only its own usage; leave out ?key= or use an admin key",
                            param="key", code="admin_required")
        key = caller.name
    days = {}
    for param in ("from", "to"):
        value = q.get(param)
        if value is not None and not _DAY.match(value):
            raise BadRequest(f"{param} must be a UTC day as YYYY-MM-DD, got {value!r}", param=param)
        days[param] = value
    rows = await asyncio.to_thread(tenants.ledger.usage, key, q.get("model") or None, days["from"], days["to"])
    totals = {c: sum(getattr(r, c) for r in rows) for c in USAGE_COUNTS}
    return {"object": "list", "data": [r.as_dict() for r in rows], "totals": totals}
