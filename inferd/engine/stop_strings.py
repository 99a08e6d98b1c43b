"""Finding stop strings in text that arrives a piece at a time."""

from __future__ import annotations

from typing import Sequence


class StopStringMatcher:
    """Passes streamed text through until a stop string appears.

    Text that could be the start of a stop string is held back until the
    next pieces show whether it is one, so a partial stop string is never
    released. When several stop strings occur, the one completed first in
    the text wins (ties go to the one that starts first); this choice does
    not depend on how the text was split into pieces.
    """

    def __init__(self, stop: Sequence[str], *, include_stop_str_in_output: bool = False):
        # An empty stop string would match before any text; it means nothing.
        self._stops = tuple(dict.fromkeys(s for s in stop if s))
        self._include_stop = include_stop_str_in_output
        self._longest_partial = max((len(s) - 1 for s in self._stops), default=0)
        self._held = ""
        self._matched: str | None = None

    def feed(self, text: str) -> tuple[str, str | None]:
        """Returns the text safe to release and the stop string found in this piece, if any."""
        if self._matched is not None:
            return "", None
        pending = self._held + text
        match = self._first_completed(pending)
        if match is not None:
            start, stop = match
            end = start + len(stop) if self._include_stop else start
            self._held = ""
            self._matched = stop
            return pending[:end], stop
        split = len(pending) - self._partial_stop_suffix_len(pending)
        self._held = pending[split:]
        return pending[:split], None

    def flush(self) -> str:
        """The text ended without a stop string: releases what was held back."""
        released, self._held = self._held, ""
        return released

    def _first_completed(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, int, str] | None = None
        for stop in self._stops:
            start = text.find(stop)
            if start < 0:
                continue
            candidate = (start + len(stop), start, stop)
            if best is None or candidate < best:
                best = candidate
        return None if best is None else (best[1], best[2])

    def _partial_stop_suffix_len(self, text: str) -> int:
        """Length of the longest tail of `text` that begins some stop string."""
        for length in range(min(len(text), self._longest_partial), 0, -1):
            tail = text[-length:]
            if any(stop.startswith(tail) for stop in self._stops):
                return length
        return 0
