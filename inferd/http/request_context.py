"""What one request carries from the door to wherever it is served: its trace
id, the key it presented and that key's ticket, and what the server hands its
generating code (the request cards). Current for the request's whole
handling, streamed body included (`current_request()`), so code far from
the route needs no extra parameter."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from inferd.tenants.gate import Tenants, Ticket
from inferd.tenants.keys import ApiKey

# A client's x-request-id is kept when it is short and plain; anything else is replaced.
SANE_TRACE_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
TRACE_HEADER = b"x-request-id"

_current: ContextVar[RequestContext | None] = ContextVar("inferd_request", default=None)


@dataclass
class RequestContext:
    trace_id: str
    path: str
    key: ApiKey | None = None
    model: str = ""  # set by a generating route's admission
    ticket: Ticket | None = None
    tenants: Tenants | None = None
    services: dict[str, Any] = field(default_factory=dict)  # what the app lends its routes (cards)
    cards: list[Any] = field(default_factory=list)  # the request cards its generations opened (serving/cards.py)
    # In a router: the ids of the cards the worker that answered opened for it (from its answer's header)
    worker_cards: list[str] = field(default_factory=list)


def current_request() -> RequestContext | None:
    return _current.get()


@contextmanager
def request_current(ctx: RequestContext) -> Iterator[None]:
    token = _current.set(ctx)
    try:
        yield
    finally:
        _current.reset(token)


def trace_id_of(headers) -> str:
    """The client's x-request-id when it is sane, else a new one."""
    for name, value in headers:
        if name == TRACE_HEADER:
            text = value.decode("latin-1").strip()
            if SANE_TRACE_ID.match(text):
                return text
            break
    return uuid.uuid4().hex
