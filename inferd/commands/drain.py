"""When a draining server gives up on what is still in flight, as `serve`
and `router` both time it.

uvicorn cancels whatever is left when --shutdown-timeout runs out, and a
cancelled stream just stops, with a traceback in the log. So each server ends
its own unfinished answers a little earlier, with its dialect's error event
or a 503, and uvicorn finds nothing left to cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

MARGIN_SECONDS = 1.0  # for the ended answers to reach their clients before uvicorn's deadline


def end_unfinished_before(timeout: float | None, loop: asyncio.AbstractEventLoop, end: Callable[[], object]) -> None:
    """Call `end()` on `loop` shortly before a drain of `timeout` seconds runs
    out. Safe to call from a signal handler; None waits for ever, as uvicorn does."""
    if timeout is None:
        return
    delay = max(timeout - MARGIN_SECONDS, timeout / 2)
    loop.call_soon_threadsafe(loop.call_later, delay, end)
