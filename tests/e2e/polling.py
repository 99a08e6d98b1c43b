"""Waiting on a condition in another process without sleeping blind."""

from __future__ import annotations

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
