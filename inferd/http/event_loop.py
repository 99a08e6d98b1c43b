"""The servers' event loop: uvloop where it is installed, asyncio's own elsewhere.

A streamed token costs the loop a wake-up, a few callbacks and a socket
write; uvloop does these in C, and the loop's time per token is time a
2-core host takes from the engine's step (measured in BENCHMARKS.md).
uvicorn picks httptools, installed beside it, for HTTP on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run(main: Coroutine[Any, Any, Any]) -> Any:
    try:
        import uvloop
    except ImportError:  # Windows, or an install without it
        return asyncio.run(main)
    return uvloop.run(main)
