"""What turns text into ids and back under a `Tokenizer`: the `tokenizers` library's
model, or, for SentencePiece vocabularies, native tables that give the same ids."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Protocol

import numpy as np
import tokenizers

from inferd.models.sentencepiece_bpe import BPETables, NativeBPE

# Texts at least this long are encoded by the tokenizers library without holding the GIL.
GIL_FREE_FROM = 4096


class InvalidTextError(ValueError):
    """Input that cannot be tokenized as text."""


SURROGATE_MESSAGE = "the text contains an unpaired UTF-16 surrogate; send valid Unicode"


class TokenizerBackend(Protocol):
    size: int  # ids, added tokens included
    special_ids: frozenset[int]
    max_token_chars: int  # the most characters one token stands for

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, with no special token added; InvalidTextError for a text that is not text."""

    def decode(self, ids: list[int]) -> str:
        """The text of every id, special ones too."""

    def id_to_token(self, token_id: int) -> str | None: ...

    def token_to_id(self, piece: str) -> int | None: ...

    def vocab(self) -> dict[str, int]:
        """Every piece's id, added tokens included."""

    def serialized(self) -> str:
        """The tokenizer as tokenizer.json text, with no padding or truncation."""


class LibraryBackend:
    """A `tokenizers.Tokenizer`."""

    def __init__(self, inner: tokenizers.Tokenizer):
        self.inner = inner
        self.size = inner.get_vocab_size(with_added_tokens=True)
        self.special_ids = frozenset(i for i, added in inner.get_added_tokens_decoder().items() if added.special)
        _bound_merge_cache(inner)

    def encode(self, text: str) -> list[int]:
        try:
            if len(text) < GIL_FREE_FROM:
                return self.inner.encode(text, add_special_tokens=False).ids
            # the batch call lets go of the GIL, so other threads (the event loop) run meanwhile
            return self.inner.encode_batch([text], add_special_tokens=False)[0].ids
        except TypeError:
            # JSON can carry lone UTF-16 surrogates ("\ud800"), which are not text.
            if any("\ud800" <= ch <= "\udfff" for ch in text):
                raise InvalidTextError(SURROGATE_MESSAGE) from None
            raise

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids, skip_special_tokens=False)

    def id_to_token(self, token_id: int) -> str | None:
        return self.inner.id_to_token(token_id)

    def token_to_id(self, piece: str) -> int | None:
        return self.inner.token_to_id(piece)

    def vocab(self) -> dict[str, int]:
        return self.inner.get_vocab(with_added_tokens=True)

    @functools.cached_property
    def max_token_chars(self) -> int:
        return max(map(len, self.vocab()), default=1)

    def serialized(self) -> str:
        inner = self.inner
        if inner.padding is not None or inner.truncation is not None:
            # A serialized tokenizer keeps its padding and truncation; a reader of it must see neither.
            inner = tokenizers.Tokenizer.from_str(inner.to_str())
            inner.no_padding()
            inner.no_truncation()
        return inner.to_str()


def _bound_merge_cache(inner: tokenizers.Tokenizer) -> None:
    """A BPE model caches the merges of every word it meets, up to 10,000. With
    no pre-tokenizer (SentencePiece-style vocabularies: Gemma, Llama 2, Mistral)
    a "word" is a whole text between special tokens, so a server's memory grew
    by each new prompt (~4 KB a prompt, to ~40 MB) for hits that never come.
    Caching nothing there costs no speed (measured: 6,000 prompts alike)."""
    if inner.pre_tokenizer is None and hasattr(inner.model, "_resize_cache"):
        inner.model._resize_cache(0)


class SentencePieceBackend:
    """Native tables of a SentencePiece vocabulary (sentencepiece_bpe.c); the same ids as
    the `tokenizers` model they were read from, whose tokenizer.json is `json_file`."""

    def __init__(self, tables: BPETables, facts: dict, native: NativeBPE, json_file: Path):
        self._native = native
        # What `vocab()` reads; the merges stay only in the native tables.
        self._vocab, self._vocab_ids = tables.vocab, tables.vocab_ids
        self._added, self._added_ids = tables.added, tables.added_ids
        self._pieces = tables.id_pieces.data.tobytes()
        self._offsets = tables.id_pieces.offsets
        self._present = tables.id_present
        self._json_file = json_file
        self.size = int(facts["size"])
        self.special_ids = frozenset(int(i) for i in facts["special_ids"])
        self.max_token_chars = int(facts["max_token_chars"])

    def encode(self, text: str) -> list[int]:
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidTextError(SURROGATE_MESSAGE) from None
        return self._native.encode(encoded)

    def decode(self, ids: list[int]) -> str:
        return self._native.decode(ids)

    def id_to_token(self, token_id: int) -> str | None:
        if not 0 <= token_id < self.size or not self._present[token_id]:
            return None
        return self._pieces[self._offsets[token_id]:self._offsets[token_id + 1]].decode("utf-8")

    def token_to_id(self, piece: str) -> int | None:
        return self._native.piece_id(piece)

    def vocab(self) -> dict[str, int]:
        vocab = dict(zip(self._vocab.strings(), self._vocab_ids.tolist()))
        vocab.update(zip(self._added.strings(), self._added_ids.tolist()))  # as the added tokens say
        return vocab

    def serialized(self) -> str:
        return self._json_file.read_text(encoding="utf-8")
