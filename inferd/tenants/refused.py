"""Why a request was turned away, in terms the HTTP layer maps to a status
and each dialect's envelope."""

from __future__ import annotations


class Refused(Exception):
    """status 401 (who are you), 403 (not allowed) or 429 (not now)."""

    def __init__(self, status: int, message: str, *, code: str, kind: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.kind = kind  # what ran out, for a 429: requests, tokens, daily_tokens, concurrency
        self.headers = headers or {}
