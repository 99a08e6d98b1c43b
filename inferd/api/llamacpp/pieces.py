"""The exact bytes a single token stands for.

Decoding one token of a multi-byte character yields U+FFFD, so the bytes
are read from the token's spelling instead: a SentencePiece byte-fallback
token (<0xC3>) or a byte-level BPE spelling (each byte one character).
"""

from __future__ import annotations

import re
from functools import lru_cache

from inferd.models.byte_level_bpe import byte_to_char, is_byte_level_spelling
from inferd.models.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def _char_to_byte() -> dict[str, int]:
    return {char: byte for byte, char in byte_to_char().items()}


def token_bytes(tokenizer: Tokenizer, token_id: int) -> bytes:
    text = tokenizer.decode([token_id], skip_special_tokens=False)
    if REPLACEMENT_CHAR not in text:
        return text.encode("utf-8")
    spelling = tokenizer.id_to_token(token_id) or ""
    fallback = _BYTE_FALLBACK.fullmatch(spelling)
    if fallback:
        return bytes([int(fallback[1], 16)])
    if spelling and is_byte_level_spelling(spelling):
        char_to_byte = _char_to_byte()
        return bytes(char_to_byte[char] for char in spelling)
    return text.encode("utf-8")  # the token really is U+FFFD


def token_piece(tokenizer: Tokenizer, token_id: int) -> str | list[int]:
    """The piece as text when it is valid UTF-8, else its byte values (llama-server's rule)."""
    raw = token_bytes(tokenizer, token_id)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)
