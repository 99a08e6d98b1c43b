"""Finding a marker in streamed text without releasing a piece of it as content."""

from __future__ import annotations


def partial_marker_length(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `marker`."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if text.endswith(marker[:length]):
            return length
    return 0


def split_at_marker(buffer: str, marker: str) -> tuple[str, str, bool]:
    """(text safe to release, what remains, whether the marker was found).

    When found, what remains is the text after the marker; otherwise it is the end of
    the buffer that could still grow into the marker.
    """
    at = buffer.find(marker)
    if at >= 0:
        return buffer[:at], buffer[at + len(marker):], True
    keep = partial_marker_length(buffer, marker)
    return buffer[:len(buffer) - keep], buffer[len(buffer) - keep:], False
