"""The tokenizer every part of inferd uses, loaded from a Hugging Face folder or a GGUF file."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import tokenizers

from inferd.models.special_tokens import END_OF_TURN_TOKENS, FIM_SPELLINGS, FimTokens
from inferd.models.tokenizer_backends import InvalidTextError, LibraryBackend, TokenizerBackend

__all__ = ["FimTokens", "InvalidTextError", "Tokenizer", "TokenizerLoadError", "load_tokenizer"]


class TokenizerLoadError(ValueError):
    """The model path does not hold a tokenizer inferd can read."""


class Tokenizer:
    """A tokenizer backend plus what the model says about its special tokens.

    BOS is added here rather than by the inner post-processor, so one rule holds
    for every source: only when the model wants it, and never twice.
    """

    def __init__(
        self,
        backend: TokenizerBackend | tokenizers.Tokenizer,
        *,
        bos_token_id: int | None,
        eos_token_id: int | None,
        add_bos: bool,
        chat_template: str | None,
        extra_eos_ids: Iterable[int] = (),
        fim_tokens: FimTokens | None = None,
    ):
        if isinstance(backend, tokenizers.Tokenizer):
            backend = LibraryBackend(backend)
        self.backend = backend
        self.vocab_size = backend.size
        self.bos_token_id = self._checked_id(bos_token_id, "bos")
        self.eos_token_id = self._checked_id(eos_token_id, "eos")
        self.bos_token = None if self.bos_token_id is None else backend.id_to_token(self.bos_token_id)
        self.eos_token = None if self.eos_token_id is None else backend.id_to_token(self.eos_token_id)
        self.add_bos = bool(add_bos) and self.bos_token_id is not None
        self.chat_template = chat_template or None
        self.special_token_ids = backend.special_ids
        self.eos_token_ids = frozenset(self._end_of_generation_ids(extra_eos_ids))
        self.fim_tokens = fim_tokens or self._find_fim_tokens()

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
            token_id = self.backend.token_to_id(spelling)
            # Only a control token ends a turn; the same text as an ordinary piece is just text.
            if token_id is not None and token_id in self.special_token_ids:
                ids.add(token_id)
        return ids

    def _find_fim_tokens(self) -> FimTokens | None:
        for spellings in FIM_SPELLINGS:
            ids = [self.backend.token_to_id(spelling) for spelling in spellings]
            if all(token_id is not None for token_id in ids):
                return FimTokens(*ids)
        return None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text)
        if add_special_tokens and self.add_bos and (not ids or ids[0] != self.bos_token_id):
            ids.insert(0, self.bos_token_id)
        return ids

    @property
    def max_token_chars(self) -> int:
        """The most characters one token can stand for (its longest piece, special tokens included)."""
        return self.backend.max_token_chars

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on `len(encode(text))`, known without encoding."""
        return -(-len(text) // self.max_token_chars)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if skip_special_tokens:
            ids = [token_id for token_id in ids if token_id not in self.special_token_ids]
        return self.backend.decode(list(ids))

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        pieces = []
        for token_id in ids:
            piece = self.backend.id_to_token(token_id) if 0 <= token_id < self.vocab_size else None
            if piece is None:
                raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
            pieces.append(piece)
        return pieces

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def token_to_id(self, piece: str) -> int | None:
        return self.backend.token_to_id(piece)


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
