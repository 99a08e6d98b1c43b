"""Ending a forwarded stream cleanly when its worker fails mid-answer.

Bytes pass through unchanged, but only whole events (SSE, up to a blank
line) or whole lines (NDJSON) are released; a worker that dies mid-event
leaves a fragment the client never sees. Then the stream ends with an error
event in its own dialect (the registry's `stream_error`), the same one an
inferd worker sends when it fails itself, so the client's SDK raises instead
of hanging or parsing garbage.
"""

from __future__ import annotations

import re

from inferd.api.registry import dialect_for_path
from inferd.http.errors import APIError

_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')


class WorkerFailed(APIError):
    """The worker went away after part of the answer was sent."""


def _framing(content_type: str) -> str:
    media = content_type.split(";")[0].strip().lower()
    if media == "text/event-stream":
        return "sse"
    if media in ("application/x-ndjson", "application/jsonl", "application/json-lines"):
        return "ndjson"
    return "raw"


def _sse_end(data: bytes) -> int:
    """Where the last complete SSE event ends (0: none yet)."""
    ends = [i + len(sep) for sep in (b"\n\n", b"\r\n\r\n") if (i := data.rfind(sep)) >= 0]
    return max(ends, default=0)


class StreamCutter:
    def __init__(self, path: str, content_type: str):
        self.path = path
        self.framing = _framing(content_type)
        self.pending = b""
        self.last_sequence: int | None = None  # Responses events are numbered; the error continues the count

    def feed(self, chunk: bytes) -> bytes:
        """The bytes that may go to the client now."""
        if self.framing == "raw":
            return chunk
        data = self.pending + chunk
        end = _sse_end(data) if self.framing == "sse" else data.rfind(b"\n") + 1
        ready, self.pending = data[:end], data[end:]
        if ready and self.framing == "sse":
            numbers = _SEQUENCE.findall(ready)
            if numbers:
                self.last_sequence = int(numbers[-1])
        return ready

    def flush(self) -> bytes:
        """The upstream ended normally: whatever it sent last goes too."""
        rest, self.pending = self.pending, b""
        return rest

    def error(self, err: APIError) -> bytes:
        """The closing error event; the fragment of a cut event is dropped."""
        self.pending = b""
        dialect = dialect_for_path(self.path)
        if self.framing != dialect.framing:
            return b""  # not the dialect's stream format, so no event of its can follow: the cut is the signal
        return dialect.stream_error(err, self.last_sequence).encode()
