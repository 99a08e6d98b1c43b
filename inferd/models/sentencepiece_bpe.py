"""SentencePiece-style BPE encoding and decoding in native code (sentencepiece_bpe.c).

Building a `tokenizers` model of a 262k-piece vocabulary with half a million
merges takes 1.5 s holding the GIL; these tables load in milliseconds without
it, and each call lets go of the GIL too, so a long prompt is tokenized while
the event loop runs.
"""

from __future__ import annotations

import array
import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inferd.native_build import build_and_load, declare

I64, I32, INT, PTR = ctypes.c_int64, ctypes.c_int32, ctypes.c_int, ctypes.c_void_p


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = build_and_load(Path(__file__).with_name("sentencepiece_bpe.c"), ["-O2", "-std=gnu11", "-shared", "-fPIC"],
                         fallback="tokenizing with the tokenizers library")
    return None if lib is None else declare(lib, {
        "inferd_spm_new": ([I64, PTR, PTR, PTR, I64, PTR, I64, PTR, PTR, PTR, I32, PTR, PTR, PTR, I32, INT, INT, INT], PTR),
        "inferd_spm_free": ([PTR], None),
        "inferd_spm_encode": ([PTR, PTR, I64, PTR, I64], I64),
        "inferd_spm_decode": ([PTR, PTR, I64, PTR, I64], I64),
        "inferd_spm_piece_id": ([PTR, PTR, I64], I32),
    })


@dataclass(frozen=True)
class PieceList:
    """Strings as one UTF-8 buffer and offsets: piece i is data[offsets[i]:offsets[i + 1]]."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64, one more than there are pieces

    @classmethod
    def of(cls, pieces: list[str]) -> "PieceList":
        encoded = [piece.encode("utf-8") for piece in pieces]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(piece) for piece in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets)

    def strings(self) -> list[str]:
        data, offsets = self.data.tobytes(), self.offsets.tolist()
        return [data[start:end].decode("utf-8") for start, end in zip(offsets, offsets[1:])]


@dataclass(frozen=True)
class BPETables:
    """What the native encoder needs, all of it read from a `tokenizers` model once."""

    vocab: PieceList  # the model's pieces
    vocab_ids: np.ndarray  # int32, the id of each
    merges: np.ndarray  # int32 [n, 3]: left id, right id, joined id; best first
    added: PieceList  # tokens matched whole in raw text
    added_ids: np.ndarray  # int32
    id_pieces: PieceList  # each id's piece, as decoding reads it
    id_present: np.ndarray  # uint8: 0 where an id has no piece
    unknown_id: int  # -1 for none
    fuse_unknown: bool
    byte_fallback: bool
    space_prefix: bool  # "▁" in front of each stretch of text, and taken off the decoded text


class NativeBPE:
    """One vocabulary's native tables; encode and decode may be called from any thread."""

    def __init__(self, tables: BPETables, lib: ctypes.CDLL):
        self._lib = lib
        t = tables
        self._handle = lib.inferd_spm_new(
            len(t.vocab_ids), _ptr(t.vocab.data), _ptr(t.vocab.offsets), _ptr(t.vocab_ids),
            len(t.merges), _ptr(t.merges),
            len(t.added_ids), _ptr(t.added.data), _ptr(t.added.offsets), _ptr(t.added_ids),
            len(t.id_present), _ptr(t.id_pieces.data), _ptr(t.id_pieces.offsets), _ptr(t.id_present),
            t.unknown_id, int(t.fuse_unknown), int(t.byte_fallback), int(t.space_prefix))
        if not self._handle:
            raise MemoryError("no memory for the tokenizer's tables")

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._lib.inferd_spm_free(handle)

    # Python arrays rather than numpy's here: a numpy array's address costs more than
    # decoding a few tokens, which the detokenizer does for every token streamed.
    def encode(self, text: bytes) -> list[int]:
        room = len(text) + 16
        while True:
            out = array.array("i", bytes(4 * room))
            count = self._lib.inferd_spm_encode(self._handle, text, len(text), out.buffer_info()[0], room)
            if count < 0:
                raise MemoryError("no memory to tokenize the text")
            if count <= room:
                return out[:count].tolist()
            room = count

    def decode(self, ids: list[int]) -> str:
        ids = array.array("i", ids)
        room = 8 * len(ids) + 64
        while True:
            out = ctypes.create_string_buffer(room)
            length = self._lib.inferd_spm_decode(self._handle, ids.buffer_info()[0], len(ids), out, room)
            if length < 0:
                raise MemoryError("no memory to decode the ids")
            if length <= room:
                return out[:length].decode("utf-8")
            room = length

    def piece_id(self, piece: str) -> int | None:
        encoded = piece.encode("utf-8")
        token_id = self._lib.inferd_spm_piece_id(self._handle, encoded, len(encoded))
        return None if token_id < 0 else token_id


def _ptr(values: np.ndarray) -> int:
    return values.ctypes.data
