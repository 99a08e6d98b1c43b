"""The tokenizer every part of inferd uses, loaded from a Hugging Face folder or a GGUF file."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import tokenizers

from inferd.models.special_tokens import END_OF_TURN_TOKENS, FIM_SPELLINGS, FimTokens

__all__ = ["FimTokens", "Tokenizer", "TokenizerLoadError", "load_tokenizer"]


class InvalidTextError(ValueError):
    """Input that cannot be tokenized as text."""


# Texts at least this long are encoded without holding the GIL.
GIL_FREE_FROM = 4096


class TokenizerLoadError(ValueError):
    """The model path does not hold a tokenizer inferd can read."""


def _bound_merge_cache(inner: tokenizers.Tokenizer) -> None:
    """A BPE model caches the merges of every word it meets, up to 10,000. With
    no pre-tokenizer (SentencePiece-style vocabularies: Gemma, Llama 2, Mistral)
    a "word" is a whole text between special tokens, so a server's memory grew
    by each new prompt (~4 KB a prompt, to ~40 MB) for hits that never come.
    Caching nothing there costs no speed (measured: 6,000 prompts alike)."""
    if inner.pre_tokenizer is None and hasattr(inner.model, "_resize_cache"):
        inner.model._resize_cache(0)


class Tokenizer:
    """A `tokenizers.Tokenizer` plus what the model says about its special tokens.

    BOS is added here rather than by the inner post-processor, so one rule holds
    for every source: only when the model wants it, and never twice.
    """

    def __init__(
        self,
        inner: tokenizers.Tokenizer,
        *,
        bos_token_id: int | None,
        eos_token_id: int | None,
        add_bos: bool,
        chat_template: str | None,
        extra_eos_ids: Iterable[int] = (),
        fim_tokens: FimTokens | None = None,
    ):
        self.inner = inner
        self.vocab_size = inner.get_vocab_size(with_added_tokens=True)
        self.bos_token_id = self._checked_id(bos_token_id, "bos")
        self.eos_token_id = self._checked_id(eos_token_id, "eos")
        self.bos_token = None if self.bos_token_id is None else inner.id_to_token(self.bos_token_id)
        self.eos_token = None if self.eos_token_id is None else inner.id_to_token(self.eos_token_id)
        self.add_bos = bool(add_bos) and self.bos_token_id is not None
        self.chat_template = chat_template or None
        self.special_token_ids = frozenset(
            token_id for token_id, added in inner.get_added_tokens_decoder().items() if added.special
        )
        self.eos_token_ids = frozenset(self._end_of_generation_ids(extra_eos_ids))
        self.fim_tokens = fim_tokens or self._find_fim_tokens()
        _bound_merge_cache(inner)

    def _checked_id(self, token_id: int | None, role: str) -> int | None:
        if token_id is None:
            return None
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerLoadError(
                f"the {role} token id {token_id} is outside the vocabulary (size {self.vocab_size}); "
                f"fix the model's {role} token setting"
            )
        return token_id

    def _end_of_generation_ids(self, extra_eos_ids: Iterable[int]) -> set[int]:
        ids = {token_id for token_id in extra_eos_ids if 0 <= token_id < self.vocab_size}
        if self.eos_token_id is not None:
            ids.add(self.eos_token_id)
        for spelling in END_OF_TURN_TOKENS:
            token_id = self.inner.token_to_id(spelling)
            # Only a control token ends a turn; the same text as an ordinary piece is just text.
            if token_id is not None and token_id in self.special_token_ids:
                ids.add(token_id)
        return ids

    def _find_fim_tokens(self) -> FimTokens | None:
        for spellings in FIM_SPELLINGS:
            ids = [self.inner.token_to_id(spelling) for spelling in spellings]
            if all(token_id is not None for token_id in ids):
                return FimTokens(*ids)
        return None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        try:
            if len(text) < GIL_FREE_FROM:
                ids = self.inner.encode(text, add_special_tokens=False).ids
            else:  # the batch call lets go of the GIL, so other threads (the event loop) run meanwhile
                ids = self.inner.encode_batch([text], add_special_tokens=False)[0].ids
        except TypeError:
            # JSON can carry lone UTF-16 surrogates ("\ud800"), which are not text.
            if any("\ud800" <= ch <= "\udfff" for ch in text):
                raise InvalidTextError("the text contains an unpaired UTF-16 surrogate; send valid Unicode") from None
            raise
        if add_special_tokens and self.add_bos and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The most characters one token can stand for (its longest piece, special tokens included)."""
        return max(map(len, self.inner.get_vocab(with_added_tokens=True)), default=1)

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on `len(encode(text))`, known without encoding."""
        return -(-len(text) // self.max_token_chars)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if skip_special_tokens:
            ids = [token_id for token_id in ids if token_id not in self.special_token_ids]
        return self.inner.decode(list(ids), skip_special_tokens=False)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        pieces = []
        for token_id in ids:
            piece = self.inner.id_to_token(token_id) if 0 <= token_id < self.vocab_size else None
            if piece is None:
                raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
            pieces.append(piece)
        return pieces

    def token_to_id(self, piece: str) -> int | None:
        return self.inner.token_to_id(piece)


def load_tokenizer(model_path: str | os.PathLike) -> Tokenizer:
    """The tokenizer of a Hugging Face model folder or of a .gguf file."""
    path = Path(model_path)
    # The loaders build Tokenizer objects, so they are imported here, not at the top.
    if path.is_dir():
        from inferd.models.hf_tokenizer import load_hf_tokenizer

        return load_hf_tokenizer(path)
    if path.is_file():
        from inferd.models.gguf_file import GGUF_MAGIC
        from inferd.models.gguf_tokenizer import load_gguf_tokenizer

        with open(path, "rb") as file:
            is_gguf = file.read(len(GGUF_MAGIC)) == GGUF_MAGIC
        if is_gguf:
            return load_gguf_tokenizer(path)
        raise TokenizerLoadError(f"{path} is not a GGUF file; pass a .gguf file or a folder with tokenizer.json")
    raise FileNotFoundError(f"no model at {path}: pass a Hugging Face model folder or a .gguf file")
