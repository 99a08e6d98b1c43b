"""The Responses API's SSE framing: each event names its type on an `event:`
line and carries a `sequence_number` counting from 0."""

from __future__ import annotations

import json

from inferd.http.errors import APIError


class Sequencer:
    def __init__(self, start: int = 0):
        self.next = start

    def event(self, type_: str, **fields) -> str:
        payload = {"type": type_, **fields, "sequence_number": self.next}
        self.next += 1
        return f"event: {type_}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"

    def error(self, err: APIError) -> str:
        return self.event("error", code=err.code or err.type, message=err.message, param=err.param)


def error_event(err: APIError, last_sequence: int | None) -> str:
    """The error that ends a stream whose last numbered event was `last_sequence`."""
    return Sequencer(0 if last_sequence is None else last_sequence + 1).error(err)
