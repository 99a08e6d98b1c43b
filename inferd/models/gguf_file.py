"""A lean reader for the GGUF container: metadata, tensor directory, raw bytes.

`gguf.GGUFReader` builds a numpy view per metadata item, which takes seconds on
a 262k-token vocabulary; this reader walks the header with `struct` and maps
tensor data lazily, so opening a file costs a fraction of that.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType


class GGUFError(ValueError):
    """The GGUF file is malformed, or uses an architecture or quant type inferd cannot load."""


_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.FLOAT64: "<d",
    GGUFValueType.BOOL: "<?",
}
_ARRAY_DTYPES = {kind: np.dtype(fmt) for kind, fmt in _SCALARS.items()}


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

    Float32 scalars read back as the shortest decimal that rounds to them (1e-06,
    not 9.99999997e-07): the value the converter was given.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                # ACCESS_COPY: writable (numpy/torch want that) yet private, and nothing is copied unless written.
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError) as e:
            raise GGUFError(f"cannot open {self.path} as a GGUF file: {e}") from e
        self._pos = 0
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

    def raw(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes as uint8, shaped (*shape[:-1], bytes per row)."""
        rows = int(np.prod(info.shape[:-1], dtype=np.int64))
        data = np.frombuffer(self._map, dtype=np.uint8, count=info.nbytes, offset=info.offset)
        return data.reshape(*info.shape[:-1], info.nbytes // max(rows, 1))

    # -- header parsing -------------------------------------------------------

    def _parse(self) -> None:
        if len(self._map) < 24 or self._read("<I") != GGUF_MAGIC:
            raise GGUFError(f"{self.path} is not a GGUF file (missing 'GGUF' magic)")
        version = self._read("<I")
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in (2, 3):
                raise GGUFError(f"{self.path} is a big-endian GGUF file; convert it little-endian to load it")
            raise GGUFError(f"{self.path} is GGUF version {version}; only versions 2 and 3 are supported")
        n_tensors, n_kv = self._read("<Q"), self._read("<Q")
        try:
            for _ in range(n_kv):
                key = self._read_str()
                self.metadata[key] = self._read_value(GGUFValueType(self._read("<I")))
            directory = [self._read_tensor_entry() for _ in range(n_tensors)]
        except (struct.error, UnicodeDecodeError) as e:
            raise GGUFError(f"{self.path} has a truncated or corrupt header: {e}") from e
        except ValueError as e:  # an unknown value-type or quant-type code
            raise GGUFError(f"{self.path} has an unknown type code in its header: {e}") from e
        alignment = int(self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT))
        data_start = -(-self._pos // alignment) * alignment
        for name, shape, qtype, rel in directory:
            info = TensorInfo(name, shape, qtype, data_start + rel, _byte_size(name, shape, qtype))
            if info.offset + info.nbytes > len(self._map):
                raise GGUFError(f"{self.path} is truncated: tensor {name!r} ends past the end of the file")
            self.tensors[name] = info

    def _read(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return value

    def _read_str(self) -> str:
        n = self._read("<Q")
        end = self._pos + n
        if end > len(self._map):
            raise struct.error("string runs past the end of the file")
        text = self._map[self._pos:end].decode("utf-8")
        self._pos = end
        return text

    def _read_value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self._read_str()
        if kind == GGUFValueType.FLOAT32:
            return shortest_float32(self._read("<f"))
        if kind != GGUFValueType.ARRAY:
            return self._read(_SCALARS[kind])
        item_kind, count = GGUFValueType(self._read("<I")), self._read("<Q")
        if item_kind in _ARRAY_DTYPES:  # fixed-size items: one vectorized read
            dtype = _ARRAY_DTYPES[item_kind]
            values = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos)
            self._pos += dtype.itemsize * count
            return values.tolist()
        return [self._read_value(item_kind) for _ in range(count)]

    def _read_tensor_entry(self) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
        name = self._read_str()
        n_dims = self._read("<I")
        dims = struct.unpack_from(f"<{n_dims}Q", self._map, self._pos)
        self._pos += 8 * n_dims
        qtype = GGMLQuantizationType(self._read("<I"))
        return name, tuple(reversed(dims)), qtype, self._read("<Q")


def shortest_float32(value: float) -> float:
    return float(str(np.float32(value)))


def _byte_size(name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    row = shape[-1] if shape else 1
    if row % block_size:
        raise GGUFError(f"tensor {name!r}: row length {row} is not a multiple of the {qtype.name} block size {block_size}")
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if shape else 1
    return rows * (row // block_size) * type_size
