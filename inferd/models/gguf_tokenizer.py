"""Loading a Tokenizer from a GGUF file: the cached rebuild when valid, else a fresh one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from inferd.models.gguf_file import GGUFFile, read_gguf_header
from inferd.models.gguf_vocab import GGUFVocab, build_tokenizer
from inferd.models.special_tokens import FimTokens
from inferd.models.tokenizer import Tokenizer
from inferd.models.tokenizer_cache import load_cached_tokenizer, store_tokenizer

log = logging.getLogger(__name__)

# Ids that end a turn in addition to eos (llama.cpp's end-of-turn and end-of-message).
_EXTRA_EOS_KEYS = ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
# Newer files name fill-in-the-middle ids fim_*, older ones prefix/suffix/middle.
_FIM_KEYS = (
    ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"),
    ("tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id", "tokenizer.ggml.middle_token_id"),
)


def load_gguf_tokenizer(model_file: Path) -> Tokenizer:
    backend = load_cached_tokenizer(model_file)
    if backend is not None:
        # Only a rebuild needs the vocabulary's arrays; a cache hit steps over them.
        metadata = read_gguf_header(model_file).metadata
    else:
        metadata = GGUFFile(model_file, tensors=False).metadata
        log.info("building the tokenizer of %s from its GGUF vocabulary", model_file)
        backend = store_tokenizer(model_file, build_tokenizer(GGUFVocab.from_metadata(metadata, str(model_file))))
    vocab_size = backend.size

    def token_id(key: str) -> int | None:
        return _valid_id(metadata, key, vocab_size)

    fim_tokens = None
    for keys in _FIM_KEYS:
        ids = [token_id(key) for key in keys]
        if all(i is not None for i in ids):
            fim_tokens = FimTokens(*ids)
            break
    return Tokenizer(
        backend,
        bos_token_id=token_id("tokenizer.ggml.bos_token_id"),
        eos_token_id=token_id("tokenizer.ggml.eos_token_id"),
        # llama.cpp adds BOS to SentencePiece vocabularies that do not say otherwise.
        add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", metadata.get("tokenizer.ggml.model") == "llama")),
        chat_template=metadata.get("tokenizer.chat_template"),
        extra_eos_ids=[i for i in map(token_id, _EXTRA_EOS_KEYS) if i is not None],
        fim_tokens=fim_tokens,
    )


def _valid_id(metadata: dict[str, Any], key: str, vocab_size: int) -> int | None:
    """The id stored under `key`, or None when absent or a placeholder outside the vocabulary (-1, 2**32-1)."""
    value = metadata.get(key)
    if value is None:
        return None
    if not 0 <= int(value) < vocab_size:
        log.warning("ignoring %s = %s: outside the vocabulary of %d tokens", key, value, vocab_size)
        return None
    return int(value)
