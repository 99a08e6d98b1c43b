"""Compile a C kernel on first use and load it with ctypes.

The kernels are plain C with OpenMP, built for this CPU (`-march=native`, or
the lower instruction set `INFERD_ISA` names: see `isa.py`) and cached by
`native_build`. They link the libgomp that torch loads, so their threads are
torch's (one pool, one thread count). Where nothing can be built, callers
keep their torch path.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from inferd.kernels import isa
from inferd.native_build import build_and_load, declare

_FLAGS = ["-O3", "-std=gnu11", "-fopenmp", "-shared", "-fPIC"]

# ctypes types of the kernels' arguments
I64, PTR, F32, INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float, ctypes.c_int


def load_kernel(source: Path, extra_flags: tuple[str, ...] = (), **signatures) -> ctypes.CDLL | None:
    """`load_library`, with each named function's (argument types, result type) declared."""
    lib = load_library(source, list(extra_flags))
    return None if lib is None else declare(lib, signatures)


def load_library(source: Path, flags: list[str] | None = None) -> ctypes.CDLL | None:
    """The compiled `source`, or None when it cannot be built here."""
    flags = _FLAGS + isa.march_flags(isa.selected()) + _openmp_link_flags() + (flags or [])
    return build_and_load(source, flags, fallback="using torch's kernels")


def _openmp_link_flags() -> list[str]:
    """Link torch's own libgomp where it ships one (the loader then reuses the
    copy torch has loaded); otherwise the system's."""
    torch_lib = Path(torch.__file__).parent / "lib"
    bundled = sorted(torch_lib.glob("libgomp*.so*"))
    if not bundled:
        return []
    return [f"-L{torch_lib}", f"-l:{bundled[0].name}", f"-Wl,-rpath,{torch_lib}"]
