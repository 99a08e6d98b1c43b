"""Anthropic's SSE framing: each event names its type on an `event:` line.
A stream cut by an error ends with an `error` event in the error envelope."""

from __future__ import annotations

import json

from inferd.api.anthropic.errors import anthropic_error, error_envelope
from inferd.http.errors import APIError


def event(payload: dict) -> str:
    return f"event: {payload['type']}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def error_event(err: APIError, last_sequence: int | None = None) -> str:
    return event(error_envelope(anthropic_error(err)))
