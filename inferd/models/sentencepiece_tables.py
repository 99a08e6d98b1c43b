"""The native encoder's tables, read from a `tokenizers` model of a SentencePiece vocabulary.

Only the shape inferd builds from a GGUF "llama" vocabulary (and Hugging Face
ships for Gemma, Llama 2, Mistral) is read: BPE with byte fallback, no
pre-tokenizer, spaces replaced by "▁" (with one in front, or not), added
tokens matched whole in raw text. Anything else answers None, and the
`tokenizers` model stays in use. Tables are only kept when the native
encoder gives the model's own ids and text on a fixed set of probes.
"""

from __future__ import annotations

import io
import json
import logging
import random
import zipfile
from pathlib import Path

import numpy as np
import tokenizers

from inferd.cache_files import write_atomically
from inferd.models.sentencepiece_bpe import BPETables, NativeBPE, PieceList

log = logging.getLogger(__name__)

SPACE_MARK = "\u2581"
# Raise when the tables' meaning changes; older files are then rebuilt.
TABLES_VERSION = 1

_REPLACE_SPACES = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE_MARK}
_PREPEND_SPACE = {"type": "Prepend", "prepend": SPACE_MARK}
_DECODE_STEPS = [{"type": "Replace", "pattern": {"String": SPACE_MARK}, "content": " "},
                 {"type": "ByteFallback"}, {"type": "Fuse"}]
_STRIP_ONE_SPACE = {"type": "Strip", "content": " ", "start": 1, "stop": 0}


def read_tables(hf: tokenizers.Tokenizer, data: dict | None = None) -> tuple[BPETables, dict] | None:
    """The tables and what the model says about its vocabulary, or None for another shape.
    `data`: the model's tokenizer.json, parsed, where the caller has it already."""
    data = data if data is not None else json.loads(hf.to_str())
    model = data.get("model") or {}
    space_prefix = _space_prefix(data.get("normalizer"), data.get("decoder"))
    if (space_prefix is None or model.get("type") != "BPE" or data.get("pre_tokenizer") is not None
            or data.get("post_processor") is not None or model.get("dropout") is not None
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
            or model.get("ignore_merges")):
        return None
    added = hf.get_added_tokens_decoder()
    if any(t.normalized or t.lstrip or t.rstrip or t.single_word for t in added.values()):
        return None
    vocab: dict[str, int] = model["vocab"]
    unknown = model.get("unk_token")
    if unknown is not None and unknown not in vocab:
        return None
    lefts, rights = zip(*map(_halves, model["merges"])) if model["merges"] else ((), ())
    merges = np.empty((len(lefts), 3), dtype=np.int32)
    merges[:, 0] = [vocab[left] for left in lefts]
    merges[:, 1] = [vocab[right] for right in rights]
    merges[:, 2] = [vocab[left + right] for left, right in zip(lefts, rights)]
    size = hf.get_vocab_size(with_added_tokens=True)
    id_pieces = [hf.id_to_token(i) for i in range(size)]
    tables = BPETables(
        vocab=PieceList.of(list(vocab)), vocab_ids=np.fromiter(vocab.values(), dtype=np.int32, count=len(vocab)),
        merges=merges,
        added=PieceList.of([t.content for t in added.values()]),
        added_ids=np.fromiter(added.keys(), dtype=np.int32, count=len(added)),
        id_pieces=PieceList.of([piece or "" for piece in id_pieces]),
        id_present=np.array([piece is not None for piece in id_pieces], dtype=np.uint8),
        unknown_id=-1 if unknown is None else vocab[unknown],
        fuse_unknown=bool(model.get("fuse_unk")), byte_fallback=bool(model.get("byte_fallback")),
        space_prefix=space_prefix)
    facts = {"size": size, "special_ids": sorted(i for i, t in added.items() if t.special),
             "max_token_chars": max(map(len, hf.get_vocab(with_added_tokens=True)), default=1)}
    return tables, facts


def _space_prefix(normalizer: dict | None, decoder: dict | None) -> bool | None:
    """Whether the shape puts "▁" in front of each stretch; None when it is not the shape read here."""
    if normalizer == _REPLACE_SPACES and decoder == {"type": "Sequence", "decoders": _DECODE_STEPS}:
        return False
    if (normalizer == {"type": "Sequence", "normalizers": [_PREPEND_SPACE, _REPLACE_SPACES]}
            and decoder == {"type": "Sequence", "decoders": [*_DECODE_STEPS, _STRIP_ONE_SPACE]}):
        return True
    return None


def _halves(merge: str | list[str]) -> tuple[str, str] | list[str]:
    return merge.split(" ", 1) if isinstance(merge, str) else merge


def agrees(native: NativeBPE, hf: tokenizers.Tokenizer, facts: dict, seed: int = 0) -> str | None:
    """None when the native tables give the model's ids and text on every probe; else the first difference."""
    rng = random.Random(seed)
    size = facts["size"]
    pieces = [p for p in (hf.id_to_token(rng.randrange(size)) for _ in range(4000)) if p]
    texts = [
        "", " ", "  ", "Hello world", " leading and trailing ", "a  b   c\n\n\td", "naïve café, 東京, Ελληνικά",
        "emoji 😀👍🏽 and \u200d joins", "\x00\x01 control \x7f", "\ue000\U000f0000 private use", "x" * 300,
        *(rng.choice(pieces).replace(SPACE_MARK, " ") + rng.choice(pieces) for _ in range(200)),
        *("".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30))).replace(SPACE_MARK, " ") for _ in range(200)),
    ]
    for text in texts:
        expected = hf.encode(text, add_special_tokens=False).ids
        if native.encode(text.encode("utf-8")) != expected:
            return f"the ids of {text[:60]!r}"
    probes = [[rng.randrange(size) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    probes += [hf.encode(text, add_special_tokens=False).ids for text in texts[:50]]
    for ids in probes:
        if native.decode(ids) != hf.decode(ids, skip_special_tokens=False):
            return f"the text of ids {ids[:12]}"
    return None


def save_tables(path: Path, tables: BPETables, facts: dict) -> None:
    arrays = {
        "vocab_data": tables.vocab.data, "vocab_offsets": tables.vocab.offsets, "vocab_ids": tables.vocab_ids,
        "merges": tables.merges, "added_data": tables.added.data, "added_offsets": tables.added.offsets,
        "added_ids": tables.added_ids, "id_data": tables.id_pieces.data, "id_offsets": tables.id_pieces.offsets,
        "id_present": tables.id_present, "special_ids": np.asarray(facts["special_ids"], dtype=np.int64),
        "settings": np.array([TABLES_VERSION, tables.unknown_id, tables.fuse_unknown, tables.byte_fallback,
                              tables.space_prefix, facts["size"], facts["max_token_chars"]], dtype=np.int64),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomically(path, buffer.getvalue())


def load_tables(path: Path) -> tuple[BPETables, dict] | None:
    """The tables saved at `path`, or None when they are missing, damaged or of another version."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            a = {name: saved[name] for name in saved.files}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        if not isinstance(error, FileNotFoundError):
            log.warning("ignoring unreadable tokenizer tables %s: %s", path, error)
        return None
    try:
        version, unknown, fuse, fallback, prefix, size, max_chars = a["settings"].tolist()
        if version != TABLES_VERSION:
            return None
        tables = BPETables(
            vocab=PieceList(a["vocab_data"], a["vocab_offsets"]), vocab_ids=a["vocab_ids"], merges=a["merges"],
            added=PieceList(a["added_data"], a["added_offsets"]), added_ids=a["added_ids"],
            id_pieces=PieceList(a["id_data"], a["id_offsets"]), id_present=a["id_present"],
            unknown_id=unknown, fuse_unknown=bool(fuse), byte_fallback=bool(fallback), space_prefix=bool(prefix))
    except (KeyError, ValueError) as error:
        log.warning("ignoring unreadable tokenizer tables %s: %s", path, error)
        return None
    if not _consistent(tables, size):
        log.warning("ignoring damaged tokenizer tables %s", path)
        return None
    return tables, {"size": size, "special_ids": a["special_ids"].tolist(), "max_token_chars": max_chars}


def _consistent(t: BPETables, size: int) -> bool:
    """Whether every length and offset the native code reads by stays inside its array."""
    lists_fit = all(p.data.dtype == np.uint8 and p.offsets.dtype == np.int64 and p.offsets.ndim == 1
                    and len(p.offsets) > 0 and p.offsets[0] == 0 and p.offsets[-1] == len(p.data)
                    and bool(np.all(np.diff(p.offsets) >= 0)) for p in (t.vocab, t.added, t.id_pieces))
    return (lists_fit and t.vocab_ids.dtype == t.added_ids.dtype == t.merges.dtype == np.int32
            and t.merges.ndim == 2 and t.merges.shape[1] == 3 and t.id_present.dtype == np.uint8
            and len(t.vocab_ids) == len(t.vocab.offsets) - 1 and len(t.added_ids) == len(t.added.offsets) - 1
            and len(t.id_present) == len(t.id_pieces.offsets) - 1 == size)
