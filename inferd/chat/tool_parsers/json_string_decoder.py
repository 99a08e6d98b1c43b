"""Decoding the body of a JSON string as it streams in."""

from __future__ import annotations

_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


class JsonStringDecoder:
    """Fed the characters after the opening quote; returns decoded text as soon as each
    character or escape is whole. `closed` once the closing quote arrives, `broken` on an
    invalid escape or a surrogate escape without its partner. Raw control characters are
    let through, as with the lenient whole-value parse.
    """

    def __init__(self) -> None:
        self.closed = False
        self.broken = False
        self._escape = ""  # an escape sequence begun but not yet whole

    @property
    def holding(self) -> bool:
        return bool(self._escape)

    def push(self, char: str) -> str:
        if self._escape:
            self._escape += char
            return self._advance_escape()
        if char == '"':
            self.closed = True
            return ""
        if char == "\\":
            self._escape = char
            return ""
        return char

    def _advance_escape(self) -> str:
        escape = self._escape
        if len(escape) == 2:
            if escape[1] in _SIMPLE_ESCAPES:
                self._escape = ""
                return _SIMPLE_ESCAPES[escape[1]]
            if escape[1] != "u":
                self.broken = True
            return ""
        if len(escape) <= 6:
            if escape[-1] not in _HEX:
                self.broken = True
            elif len(escape) == 6:
                return self._single_unit(int(escape[2:6], 16))
            return ""
        # A high surrogate waits for `\uDC00`-`\uDFFF` to make one character.
        if (len(escape) == 7 and escape[-1] != "\\") or (len(escape) == 8 and escape[-1] != "u") \
                or (len(escape) > 8 and escape[-1] not in _HEX):
            self.broken = True
            return ""
        if len(escape) < 12:
            return ""
        high, low = int(escape[2:6], 16), int(escape[8:12], 16)
        if not 0xDC00 <= low <= 0xDFFF:
            self.broken = True
            return ""
        self._escape = ""
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))

    def _single_unit(self, code: int) -> str:
        if 0xD800 <= code <= 0xDBFF:
            return ""
        if 0xDC00 <= code <= 0xDFFF:
            self.broken = True
            return ""
        self._escape = ""
        return chr(code)
