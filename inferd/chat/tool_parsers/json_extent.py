"""Where a JSON object or array ends in a character stream."""

from __future__ import annotations

_CLOSER = {"{": "}", "[": "]"}


class JsonExtent:
    """Tracks strings and brackets one character at a time.

    Only the structure is followed: the value is complete when its outermost bracket
    closes, and broken when a bracket is mismatched or something other than whitespace
    comes before the first one. Everything else is left to `json.loads` on the whole
    value. Strings are tracked even after the value ends, so a caller can tell whether a
    marker sits inside one.
    """

    def __init__(self) -> None:
        self.in_string = False
        self.complete = False
        self.broken = False
        self._escaped = False
        self._closers: list[str] = []

    def push(self, char: str) -> None:
        if self.in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self.in_string = False
            return
        if char == '"':
            self.in_string = True
        if self.complete or self.broken:
            return
        if char in _CLOSER:
            self._closers.append(_CLOSER[char])
        elif char in "}]":
            if not self._closers or self._closers.pop() != char:
                self.broken = True
            elif not self._closers:
                self.complete = True
        elif not self._closers and not char.isspace():
            self.broken = True
