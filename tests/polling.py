"""Waiting on a condition in another process, thread or task without sleeping blind.

Both return the predicate's first truthy value, or its last falsy one once
`timeout` seconds have passed, so a test says what it waited for:

    assert wait_for(lambda: server.health().json()["running"] == 0, timeout=5.0), "still running"
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """Poll `predicate()` until it is truthy or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


async def async_wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """`wait_for` inside an event loop, which keeps running meanwhile; `predicate`
    may return a value or an awaitable (a coroutine function, `lambda: client.get(key)`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value or loop.time() > deadline:
            return value
        await asyncio.sleep(interval)
