"""A `tokenizers.Tokenizer` rebuilt from the vocabulary a GGUF file carries.

Two vocabulary kinds are understood, named by `tokenizer.ggml.model`:
  "llama": SentencePiece BPE (pieces with scores, "▁" for spaces, byte fallback);
  "gpt2":  byte-level BPE (pieces over a 256-character byte alphabet, explicit merges).
Control and user-defined pieces become added tokens, so text such as
`<start_of_turn>` is matched whole before BPE runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from inferd.models.byte_level_bpe import (
    PRES_THAT_IGNORE_MERGES,
    SPLIT_PATTERNS_BY_PRE,
    is_byte_level_spelling,
    spell_byte_level,
)
from inferd.models.sentencepiece_merges import CONTROL, NORMAL, USER_DEFINED, derive_merges, merge_order

log = logging.getLogger(__name__)

SPACE_MARK = "\u2581"  # "▁", SentencePiece's spelling of a space
SUPPORTED_MODELS = ("llama", "gpt2")


class UnsupportedVocabularyError(ValueError):
    """The GGUF describes a tokenizer kind inferd cannot rebuild."""


@dataclass(frozen=True)
class GGUFVocab:
    kind: str  # tokenizer.ggml.model
    pre: str | None  # tokenizer.ggml.pre
    tokens: list[str]
    token_types: np.ndarray
    scores: np.ndarray | None
    merges: list[str] | None
    unknown_token_id: int | None
    add_space_prefix: bool

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], source: str) -> "GGUFVocab":
        kind = metadata.get("tokenizer.ggml.model")
        if kind not in SUPPORTED_MODELS:
            raise UnsupportedVocabularyError(
                f"{source}: tokenizer.ggml.model is {kind!r}; inferd reads {' and '.join(SUPPORTED_MODELS)} "
                "vocabularies, so use a Hugging Face folder with tokenizer.json for this model"
            )
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not tokens:
            raise UnsupportedVocabularyError(
                f"{source}: the file has no tokenizer.ggml.tokens, so it carries no tokenizer; "
                "use a GGUF converted with its vocabulary"
            )
        token_types = metadata.get("tokenizer.ggml.token_type")
        if token_types is None:
            token_types = np.full(len(tokens), NORMAL, dtype=np.int32)
        scores = metadata.get("tokenizer.ggml.scores")
        if len(token_types) != len(tokens) or (scores is not None and len(scores) != len(tokens)):
            raise UnsupportedVocabularyError(
                f"{source}: tokenizer.ggml.tokens, token_type and scores differ in length; the file is damaged"
            )
        return cls(
            kind=kind,
            pre=metadata.get("tokenizer.ggml.pre"),
            tokens=list(tokens),
            token_types=np.asarray(token_types),
            scores=None if scores is None else np.asarray(scores),
            merges=metadata.get("tokenizer.ggml.merges"),
            unknown_token_id=metadata.get("tokenizer.ggml.unknown_token_id"),
            # llama.cpp's default for SentencePiece vocabularies that do not say.
            add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", kind == "llama")),
        )


def build_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    if vocab.kind == "llama":
        return _sentencepiece_tokenizer(vocab)
    return _byte_level_tokenizer(vocab)


def _sentencepiece_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    # Runs of spaces are stored with real spaces, but BPE sees spaces as "▁".
    pieces = [
        token.replace(" ", SPACE_MARK) if token and not token.strip() else token
        for token in vocab.tokens
    ]
    scores = vocab.scores if vocab.scores is not None else -np.arange(len(pieces), dtype=np.float64)
    merges = derive_merges(pieces, merge_order(vocab.token_types, scores))
    unknown = pieces[vocab.unknown_token_id] if vocab.unknown_token_id is not None else None
    tokenizer = Tokenizer(
        BPE(vocab=_ids_by_piece(pieces), merges=merges, unk_token=unknown, fuse_unk=True, byte_fallback=True)
    )
    replace_spaces = normalizers.Replace(" ", SPACE_MARK)
    steps = [decoders.Replace(SPACE_MARK, " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        # Like llama.cpp: every stretch of text (start, or after an added token) gets one leading space.
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE_MARK), replace_spaces])
        steps.append(decoders.Strip(" ", 1, 0))
    else:
        tokenizer.normalizer = replace_spaces
    tokenizer.decoder = decoders.Sequence(steps)
    _add_control_and_user_defined(tokenizer, pieces, vocab)
    return tokenizer


def _byte_level_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    if not vocab.merges:
        raise UnsupportedVocabularyError("a gpt2 vocabulary needs tokenizer.ggml.merges, and this file has none")
    pieces = [
        token if token_type != NORMAL or is_byte_level_spelling(token) else spell_byte_level(token)
        for token, token_type in zip(vocab.tokens, vocab.token_types.tolist())
    ]
    merges = []
    for merge in vocab.merges:
        halves = merge.split(" ")
        if len(halves) != 2:
            raise UnsupportedVocabularyError(f"merge {merge!r} is not two pieces separated by one space")
        merges.append((halves[0], halves[1]))
    pre = vocab.pre or "default"
    pattern = SPLIT_PATTERNS_BY_PRE.get(pre)
    if pattern is None:
        log.warning("tokenizer.ggml.pre %r is not known; splitting text with the GPT-2 pattern", pre)
        pattern = SPLIT_PATTERNS_BY_PRE["default"]
    tokenizer = Tokenizer(
        BPE(vocab=_ids_by_piece(pieces), merges=merges, ignore_merges=pre in PRES_THAT_IGNORE_MERGES)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    _add_control_and_user_defined(tokenizer, pieces, vocab)
    return tokenizer


def _ids_by_piece(pieces: Sequence[str]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for token_id, piece in enumerate(pieces):
        # A map cannot hold a piece twice: the first id wins, the later one is never produced.
        ids.setdefault(piece, token_id)
    if len(ids) != len(pieces):
        log.warning("the vocabulary repeats %d pieces; only the first id of each is used", len(pieces) - len(ids))
    return ids


def _add_control_and_user_defined(tokenizer: Tokenizer, pieces: Sequence[str], vocab: GGUFVocab) -> None:
    """Control pieces become special added tokens, user-defined pieces plain added tokens.

    Both are matched in raw text. A piece whose BPE spelling differs from its
    stored text (runs of spaces) is left to BPE, where merges build it.
    """
    kept_as_stored = [
        (piece, token_type)
        for piece, stored, token_type in zip(pieces, vocab.tokens, vocab.token_types.tolist())
        if piece and piece == stored and token_type in (CONTROL, USER_DEFINED)
    ]
    tokenizer.add_special_tokens(
        [AddedToken(piece, special=True, normalized=False) for piece, kind in kept_as_stored if kind == CONTROL]
    )
    tokenizer.add_tokens(
        [AddedToken(piece, special=False, normalized=False) for piece, kind in kept_as_stored if kind == USER_DEFINED]
    )
