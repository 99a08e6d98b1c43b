"""The GGUF container reader: metadata, tensor directory, raw tensor bytes.

`gguf.GGUFReader` builds a numpy view per metadata item, which takes seconds on
a 262k-token vocabulary; this reader walks the header with `struct` and maps
tensor data lazily, so opening a file costs a fraction of that. Metadata a
caller does not need (the vocabulary, once a cached tokenizer exists) can be
stepped over without being decoded, and the tensor directory left unread.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32

# Metadata value type codes (gguf.GGUFValueType), spelled out so that reading
# metadata alone does not import the `gguf` package, which takes a tenth of a second.
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALARS = {
    kind: struct.Struct(fmt)
    for kind, fmt in {
        _UINT8: "<B", _INT8: "<b", _UINT16: "<H", _INT16: "<h", _UINT32: "<I", _INT32: "<i",
        _UINT64: "<Q", _INT64: "<q", _FLOAT32: "<f", _FLOAT64: "<d", _BOOL: "<?",
    }.items()
}
_ARRAY_DTYPES = {kind: np.dtype(s.format) for kind, s in _SCALARS.items()}
_U32, _U64 = _SCALARS[_UINT32], _SCALARS[_UINT64]


# The arrays that hold a vocabulary: the bulk of a GGUF header.
VOCABULARY_ARRAYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                               "tokenizer.ggml.merges"})


class GGUFError(ValueError):
    """The GGUF file is malformed, or uses an architecture or quant type inferd cannot load."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # PyTorch order: the last dimension is the contiguous one
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset in the file
    nbytes: int


class GGUFFile:
    """Metadata (`metadata`, key -> Python value) and tensor directory (`tensors`,
    name -> TensorInfo, in file order) of one GGUF file.

    Keys named in `skip` are stepped over without being decoded and left out of
    `metadata`. With `tensors=False` the tensor directory is not read: `tensors`
    stays empty and the file is closed once the metadata is in.

    Arrays read back as lists. Float32 scalars read back as the shortest decimal
    that rounds to them (1e-06, not 9.99999997e-07): the value the converter was given.
    """

    def __init__(self, path: str | Path, *, skip: Collection[str] = (), tensors: bool = True):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                # ACCESS_COPY: writable (numpy/torch want that) yet private, and nothing is copied unless written.
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError) as e:
            raise GGUFError(f"cannot open {self.path} as a GGUF file: {e}") from e
        self._pos = 0
        self.metadata: dict[str, Any] = {}
        self.skipped_lengths: dict[str, int] = {}  # item counts of the arrays in `skip`
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._parse(frozenset(skip), tensors)
        finally:
            if not tensors:  # metadata values are copies, so nothing needs the map any more
                self._map.close()

    def raw(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes as uint8, shaped (*shape[:-1], bytes per row)."""
        rows = int(np.prod(info.shape[:-1], dtype=np.int64))
        data = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        return data.reshape(*info.shape[:-1], info.nbytes // max(rows, 1))

    # -- header parsing -------------------------------------------------------

    def _parse(self, skip: frozenset[str], with_tensors: bool) -> None:
        if len(self._map) < 24 or self._map[:4] != GGUF_MAGIC:
            raise GGUFError(f"{self.path} is not a GGUF file (missing 'GGUF' magic)")
        self._pos = 4
        version = self._read(_U32)
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (2, 3):
                raise GGUFError(f"{self.path} is a big-endian GGUF file; convert it little-endian to load it")
            raise GGUFError(f"{self.path} is GGUF version {version}; only versions 2 and 3 are supported")
        n_tensors, n_kv = self._read(_U64), self._read(_U64)
        try:
            for _ in range(n_kv):
                key = self._read_str()
                kind = self._read(_U32)
                if key in skip:
                    length = self._read_value(kind, keep=False)
                    if kind == _ARRAY:
                        self.skipped_lengths[key] = length
                else:
                    self.metadata[key] = self._read_value(kind)
            if with_tensors:
                self._read_tensor_directory(n_tensors)
        except struct.error:
            raise GGUFError(
                f"{self.path}: the header runs past the end of the file; the file is truncated, download it again"
            ) from None
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: a header string is not valid UTF-8: {e}") from e
        except GGUFError:
            raise
        except ValueError as e:  # an unknown value-type or quant-type code
            raise GGUFError(f"{self.path} has an unknown type code in its header: {e}") from e

    def _read_tensor_directory(self, n_tensors: int) -> None:
        # Imported here: reading metadata alone does without the `gguf` package.
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        directory = []
        for _ in range(n_tensors):
            name = self._read_str()
            n_dims = self._read(_U32)
            dims = struct.unpack_from(f"<{n_dims}Q", self._map, self._pos)
            self._pos += 8 * n_dims
            qtype = GGMLQuantizationType(self._read(_U32))
            directory.append((name, tuple(reversed(dims)), qtype, self._read(_U64)))
        alignment = int(self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
        data_start = -(-self._pos // alignment) * alignment
        for name, shape, qtype, rel in directory:
            info = TensorInfo(name, shape, qtype, data_start + rel, _byte_size(name, shape, qtype, GGML_QUANT_SIZES))
            if info.offset + info.nbytes > len(self._map):
                raise GGUFError(f"{self.path} is truncated: tensor {name!r} ends past the end of the file")
            self.tensors[name] = info

    def _read(self, fmt: struct.Struct) -> Any:
        (value,) = fmt.unpack_from(self._map, self._pos)
        self._pos += fmt.size
        return value

    def _take(self, nbytes: int) -> int:
        """Steps over `nbytes` bytes and returns where they start."""
        start, end = self._pos, self._pos + nbytes
        if end > len(self._map):
            raise struct.error("data runs past the end of the file")
        self._pos = end
        return start

    def _read_str(self) -> str:
        start = self._take(self._read(_U64))
        return self._map[start:self._pos].decode("utf-8")

    def _read_value(self, kind: int, keep: bool = True) -> Any:
        """The value of type `kind` at the cursor; with keep=False arrays are stepped over and their length returned."""
        if kind in _SCALARS:
            value = self._read(_SCALARS[kind])
            return shortest_float32(value) if kind == _FLOAT32 else value
        if kind == _STRING:
            return self._read_str()
        if kind != _ARRAY:
            raise ValueError(f"unknown metadata value type {kind}")
        item_kind, count = self._read(_U32), self._read(_U64)
        if item_kind in _ARRAY_DTYPES:  # fixed-size items: one vectorized read
            dtype = _ARRAY_DTYPES[item_kind]
            start = self._take(dtype.itemsize * count)
            return np.frombuffer(self._map, dtype=dtype, count=count, offset=start).tolist() if keep else count
        if item_kind == _STRING:
            if keep:
                return self._read_strings(count)
            self._skip_strings(count)
            return count
        items = [self._read_value(item_kind, keep) for _ in range(count)]
        return items if keep else count

    # The two loops below run once per vocabulary entry, hence the local names.

    def _read_strings(self, count: int) -> list[str]:
        buffer, pos, size, unpack = self._map, self._pos, len(self._map), _U64.unpack_from
        strings = []
        append = strings.append
        for _ in range(count):
            (length,) = unpack(buffer, pos)
            pos += 8
            end = pos + length
            if end > size:
                raise struct.error("a string runs past the end of the file")
            append(buffer[pos:end].decode("utf-8"))
            pos = end
        self._pos = pos
        return strings

    def _skip_strings(self, count: int) -> None:
        buffer, pos, unpack = self._map, self._pos, _U64.unpack_from
        for _ in range(count):
            pos += 8 + unpack(buffer, pos)[0]
        if pos > len(buffer):
            raise struct.error("a string runs past the end of the file")
        self._pos = pos


def read_gguf_header(path: str | Path) -> GGUFFile:
    """The file's metadata without its vocabulary, and its tensor directory, parsed
    once per version of the file: loading a model reads them for its config, its
    block formats and its tokenizer. Shared, so callers only read it."""
    stat = os.stat(path)
    return _parsed_header(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _parsed_header(path: str, size: int, mtime_ns: int) -> GGUFFile:
    return GGUFFile(path, skip=VOCABULARY_ARRAYS)


def shortest_float32(value: float) -> float:
    return float(str(np.float32(value)))


def _byte_size(name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType, quant_sizes: dict) -> int:
    block_size, type_size = quant_sizes[qtype]
    row = shape[-1] if shape else 1
    if row % block_size:
        raise GGUFError(f"tensor {name!r}: row length {row} is not a multiple of the {qtype.name} block size {block_size}")
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if shape else 1
    return rows * (row // block_size) * type_size
