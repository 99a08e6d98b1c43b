"""Waiting on a condition in another process or task without sleeping blind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """Poll until `predicate()` is truthy (its value) or `timeout` passes (the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


async def async_wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """`wait_for` for coroutine predicates, so the event loop keeps running meanwhile."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value or asyncio.get_running_loop().time() > deadline:
            return value
        await asyncio.sleep(interval)
