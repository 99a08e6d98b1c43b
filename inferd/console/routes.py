"""The console's routes: the page and its assets under /ui, and GET /api/stats.

    console_router("server", lambda request: server_stats(state))

The assets are read from the package once, at start; each answer carries a
Content Security Policy that allows this origin's own scripts, styles and
fetches only (no inline script, no outside origin), and an ETag, so a reload
costs a 304. The page and its assets are open (they hold no data): the page
asks for a key when the API answers 401. /api/stats is behind the key like
every other route.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from inferd import __version__
from inferd.http.errors import NotFound

ROLES = ("server", "router")
PREFIX = "/ui"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer"}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


class Asset:
    def __init__(self, body: bytes, media_type: str):
        self.body = body
        self.media_type = media_type
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'

    def response(self, request: Request) -> Response:
        headers = {**SECURITY_HEADERS, "ETag": self.etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == self.etag:
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def load_assets(role: str) -> dict[str, Asset]:
    """Every file of `assets/` by name; the page learns its role and version from index.html's meta tags."""
    folder = resources.files("inferd.console") / "assets"
    assets = {}
    for item in folder.iterdir():
        suffix = item.name[item.name.rfind("."):]
        if item.is_file() and suffix in TYPES:
            body = item.read_bytes()
            if item.name == "index.html":
                body = body.replace(b"{{role}}", role.encode()).replace(b"{{version}}", __version__.encode())
            assets[item.name] = Asset(body, TYPES[suffix])
    return assets


def open_paths() -> tuple[str, ...]:
    """The console's paths that need no key: the page and its assets (never /api/stats)."""
    folder = resources.files("inferd.console") / "assets"
    return (PREFIX, f"{PREFIX}/", *(f"{PREFIX}/{item.name}" for item in folder.iterdir() if item.is_file()))


def console_router(role: str, stats: Callable[[Request], dict]) -> APIRouter:
    """`stats(request)` builds /api/stats's body (`server_stats`, `router_stats`); it must be cheap:
    it runs on the event loop, as /metrics does."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    assets = load_assets(role)
    router = APIRouter(include_in_schema=False)  # as /metrics, whose numbers /api/stats gives

    @router.get(PREFIX)
    async def to_page():
        return RedirectResponse("ui/", status_code=308, headers=SECURITY_HEADERS)

    @router.get(f"{PREFIX}/")
    async def page(request: Request):
        return assets["index.html"].response(request)

    @router.get(PREFIX + "/{name}")
    async def asset(name: str, request: Request):
        found = assets.get(name)
        if found is None:
            raise NotFound(f"the console has no file {name!r}; open {PREFIX}/", code="not_found")
        return found.response(request)

    @router.get("/api/stats")
    async def api_stats(request: Request):
        return JSONResponse(stats(request), headers={"Cache-Control": "no-store"})

    return router
