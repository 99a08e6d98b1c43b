"""Reads the key/value metadata section of a GGUF file, never its tensors.

Walking the header directly is far quicker than building a full tensor index:
a 262k-token vocabulary is read in a fraction of a second. Arrays the caller
does not need (the vocabulary itself, once a cached tokenizer exists) are
stepped over without being decoded.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Collection
from typing import Any

import numpy as np

GGUF_MAGIC = b"GGUF"

# GGUF value type codes.
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)

_SCALAR_FORMATS = {
    _UINT8: "B", _INT8: "b", _UINT16: "H", _INT16: "h", _UINT32: "I", _INT32: "i",
    _FLOAT32: "f", _BOOL: "?", _UINT64: "Q", _INT64: "q", _FLOAT64: "d",
}
_NUMPY_DTYPES = {
    _UINT8: "u1", _INT8: "i1", _UINT16: "u2", _INT16: "i2", _UINT32: "u4", _INT32: "i4",
    _FLOAT32: "f4", _BOOL: "?", _UINT64: "u8", _INT64: "i8", _FLOAT64: "f8",
}


class GGUFFormatError(ValueError):
    """The file is not a GGUF this reader understands."""


class _Cursor:
    def __init__(self, buffer: mmap.mmap, path: str):
        self.buffer = buffer
        self.offset = 0
        self.path = path
        self.endian = "<"

    def truncated(self) -> str:
        return f"{self.path}: metadata ends early at byte {self.offset}; the file is truncated, download it again"

    def unpack(self, fmt: str) -> Any:
        fmt = self.endian + fmt
        try:
            (value,) = struct.unpack_from(fmt, self.buffer, self.offset)
        except struct.error:
            raise GGUFFormatError(self.truncated()) from None
        self.offset += struct.calcsize(fmt)
        return value

    def take(self, length: int) -> bytes:
        end = self.offset + length
        if end > len(self.buffer):
            raise GGUFFormatError(self.truncated())
        chunk = self.buffer[self.offset:end]
        self.offset = end
        return chunk

    def string(self) -> str:
        raw = self.take(self.unpack("Q"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFFormatError(f"{self.path}: a metadata string is not valid UTF-8 (byte {self.offset})") from None

    def skip_strings(self, count: int) -> None:
        fmt = self.endian + "Q"
        buffer, offset = self.buffer, self.offset
        try:
            for _ in range(count):
                (length,) = struct.unpack_from(fmt, buffer, offset)
                offset += 8 + length
        except struct.error:
            raise GGUFFormatError(self.truncated()) from None
        if offset > len(buffer):
            raise GGUFFormatError(self.truncated())
        self.offset = offset


def _read_value(cursor: _Cursor, value_type: int, keep: bool) -> Any:
    if value_type in _SCALAR_FORMATS:
        return cursor.unpack(_SCALAR_FORMATS[value_type])
    if value_type == _STRING:
        return cursor.string()
    if value_type != _ARRAY:
        raise GGUFFormatError(f"{cursor.path}: unknown metadata value type {value_type} at byte {cursor.offset}")
    item_type = cursor.unpack("I")
    count = cursor.unpack("Q")
    if item_type in _NUMPY_DTYPES:
        dtype = np.dtype(_NUMPY_DTYPES[item_type]).newbyteorder(cursor.endian)
        raw = cursor.take(count * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("=")) if keep else None
    if item_type == _STRING:
        if not keep:
            cursor.skip_strings(count)
            return None
        return [cursor.string() for _ in range(count)]
    # Nested arrays are rare and small; read them element by element.
    items = [_read_value(cursor, item_type, keep) for _ in range(count)]
    return items if keep else None


def read_gguf_metadata(path: str | os.PathLike, *, skip: Collection[str] = ()) -> dict[str, Any]:
    """Every metadata key of a GGUF file mapped to its value.

    Numeric arrays come back as numpy arrays, string arrays as lists of str.
    Keys named in `skip` are stepped over and left out of the result.
    """
    path = os.fspath(path)
    with open(path, "rb") as file:
        try:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            raise GGUFFormatError(f"{path}: the file is empty, not a GGUF model") from None
    # The cursor only copies bytes out of the map, so nothing keeps it open past this block.
    with mapped:
        return _read_all(_Cursor(mapped, path), frozenset(skip))


def _read_all(cursor: _Cursor, skip: frozenset[str]) -> dict[str, Any]:
    if cursor.take(4) != GGUF_MAGIC:
        raise GGUFFormatError(f"{cursor.path}: not a GGUF file (it does not start with 'GGUF')")
    version = cursor.unpack("I")
    if version > 0xFFFF:  # written on a big-endian machine
        cursor.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version < 2:
        raise GGUFFormatError(
            f"{cursor.path}: GGUF version {version} is too old; convert the model again with a current converter"
        )
    cursor.unpack("Q")  # tensor count
    kv_count = cursor.unpack("Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        value_type = cursor.unpack("I")
        keep = key not in skip
        value = _read_value(cursor, value_type, keep)
        if keep:
            metadata[key] = value
    return metadata
