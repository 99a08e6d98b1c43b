"""Which rows of a forward pass must be computed exactly as a lone decode row is.

A projection may compute a few rows one way (the file's blocks, int8
activations per row) and many rows another (a dense GEMM), so the same
token's logits depend on how many rows shared its step. Speculative
verification needs each of its rows to come out bit for bit as plain
decoding would compute it, one row alone: the runner marks how many leading
rows of the step are such rows, and the layers that switch by row count
(`GGUFLinear`) compute those on their single-row path.

A context variable, so engines on different threads do not see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_LEADING_DECODE_ROWS: ContextVar[int] = ContextVar("leading_decode_rows", default=0)


@contextmanager
def lone_decode_rows(count: int) -> Iterator[None]:
    """Within the block, the first `count` rows of every projection's input
    are computed the way a one-row input would be."""
    token = _LEADING_DECODE_ROWS.set(count)
    try:
        yield
    finally:
        _LEADING_DECODE_ROWS.reset(token)


def leading_decode_rows() -> int:
    return _LEADING_DECODE_ROWS.get()
