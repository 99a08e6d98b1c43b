"""ASGI middleware counting answers by route template and status, and making
the app's metrics current for code that runs far from the app.

`metrics()` gives the app's metrics object, or None when metrics are off; it
needs a `requests` counter labelled by route and status. Generation code
reads `current_metrics()` instead of having it threaded through every dialect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# Requests answered before routing (401, 413, 415) or matching no route (404):
# labelled together, so a scan of random URLs cannot grow the label set.
UNMATCHED_ROUTE = "unmatched"

_current: ContextVar[Any | None] = ContextVar("inferd_metrics", default=None)


def current_metrics() -> Any | None:
    """The metrics of the app serving the current request (None: metrics off)."""
    return _current.get()


@contextmanager
def metrics_current(metrics: Any) -> Iterator[None]:
    """Make `metrics` current for the code run inside the block."""
    token = _current.set(metrics)
    try:
        yield
    finally:
        _current.reset(token)


class RequestMetrics:
    def __init__(self, app, metrics: Callable[[], Any | None]):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        metrics = self.metrics()
        if scope["type"] != "http" or metrics is None:
            return await self.app(scope, receive, send)
        status = 500  # what the client gets if the app raises before answering

        async def send_and_note_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            with metrics_current(metrics):
                await self.app(scope, receive, send_and_note_status)
        finally:
            metrics.requests.labels(route=route_template(scope), status=str(status)).inc()


def route_template(scope) -> str:
    route = scope.get("route")
    return getattr(route, "path", None) or UNMATCHED_ROUTE
