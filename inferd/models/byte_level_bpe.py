"""The byte-level BPE alphabet and the split patterns byte-level vocabularies were trained with.

Byte-level vocabularies spell every byte as one printable character, so a
token is a string over a fixed 256-character alphabet. The pre-tokenizer
pattern decides where merges may never cross; each model family was trained
with its own, named in GGUF files by `tokenizer.ggml.pre`.
"""

from __future__ import annotations

from functools import lru_cache

# GPT-2's original split pattern (what `tokenizers`' ByteLevel pre-tokenizer applies itself).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Llama 3: case-insensitive contractions, digits in groups of up to three.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen 2 and its derivatives: like Llama 3, but every digit stands alone.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPLIT_PATTERNS_BY_PRE = {
    "default": GPT2_PATTERN,
    "gpt-2": GPT2_PATTERN,
    "gpt2": GPT2_PATTERN,
    "llama-bpe": LLAMA3_PATTERN,
    "llama3": LLAMA3_PATTERN,
    "llama-v3": LLAMA3_PATTERN,
    "smaug-bpe": LLAMA3_PATTERN,
    "dbrx": LLAMA3_PATTERN,
    "falcon3": LLAMA3_PATTERN,
    "qwen2": QWEN2_PATTERN,
    "deepseek-r1-qwen": QWEN2_PATTERN,
}

# Llama 3 vocabularies use a word as one token when the vocabulary has it whole,
# even where the merges would not build it.
PRES_THAT_IGNORE_MERGES = frozenset({"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx", "falcon3"})


@lru_cache(maxsize=1)
def byte_to_char() -> dict[int, str]:
    """Each byte's printable stand-in: printable Latin-1 bytes stand for themselves,
    the rest are moved, in order, to code points from 256 upwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    next_code_point = 256
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(next_code_point)
            next_code_point += 1
    return mapping


def is_byte_level_spelling(text: str) -> bool:
    alphabet = _alphabet()
    return all(char in alphabet for char in text)


def spell_byte_level(text: str) -> str:
    """`text`'s UTF-8 bytes written in the byte-level alphabet."""
    mapping = byte_to_char()
    return "".join(mapping[byte] for byte in text.encode("utf-8"))


@lru_cache(maxsize=1)
def _alphabet() -> frozenset[str]:
    return frozenset(byte_to_char().values())
