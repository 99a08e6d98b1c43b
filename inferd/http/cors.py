"""Browsers calling from other origins (`--cors-origin`, repeatable, `*` for
any): preflights answered before auth (a preflight carries no key), and the
headers a browser client reads exposed to it."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.middleware.cors import CORSMiddleware

EXPOSED = (
    "x-request-id", "x-inferd-request-card", "retry-after",
    "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
)
PREFLIGHT_MAX_AGE = 600


def add_cors(app, origins: Sequence[str]) -> None:
    """Added last, so it runs first. No origins: no CORS headers at all."""
    if not origins:
        return
    app.add_middleware(CORSMiddleware, allow_origins=list(origins), allow_methods=["*"], allow_headers=["*"],
                       expose_headers=list(EXPOSED), max_age=PREFLIGHT_MAX_AGE)
