"""A dependency-free progress bar for weight loading: redrawn in place on a
terminal, a log line per quarter otherwise (so service logs stay short)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("inferd.load")


def with_progress(items: Iterable[T], total: int, label: str, width: int = 30) -> Iterator[T]:
    tty = sys.stderr.isatty()
    next_quarter = 1
    done = 0
    for item in items:
        yield item
        done += 1
        if not total:
            continue
        if tty:
            filled = width * done // total
            sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done * 4 >= next_quarter * total:
            log.info("%s: %d/%d tensors", label, done, total)
            next_quarter = done * 4 // total + 1
