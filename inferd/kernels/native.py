"""Compile a C kernel on first use and load it with ctypes.

The kernels are plain C with OpenMP, built with the system C compiler for
this CPU (`-march=native`, or the lower instruction set `INFERD_ISA` names:
see `isa.py`) in well under a second, and cached under
`$XDG_CACHE_HOME/inferd/kernels` by a hash of the source (and the headers
beside it), the flags, the compiler and the CPU, so later starts only load
them. They link the libgomp that torch loads, so their threads are torch's
(one pool, one thread count).

Without a C compiler, or with `INFERD_NATIVE_KERNELS=0`, nothing is built
and callers keep their torch path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from inferd.kernels import isa
from inferd.models.tokenizer_cache import directory_accepts_writes, user_cache_dir

log = logging.getLogger(__name__)

_FLAGS = ["-O3", "-std=gnu11", "-fopenmp", "-shared", "-fPIC"]


def native_kernels_enabled() -> bool:
    return os.environ.get("INFERD_NATIVE_KERNELS", "1").lower() not in ("0", "false", "no", "off")


# ctypes types of the kernels' arguments
I64, PTR, F32, INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float, ctypes.c_int


def load_kernel(source: Path, extra_flags: tuple[str, ...] = (), **signatures) -> ctypes.CDLL | None:
    """`load_library`, with each named function's (argument types, result type) declared."""
    lib = load_library(source, list(extra_flags))
    if lib is not None:
        for name, (argtypes, restype) in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, restype
    return lib


def load_library(source: Path, flags: list[str] | None = None) -> ctypes.CDLL | None:
    """The compiled `source`, or None when it cannot be built here."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None or not native_kernels_enabled():
        return None
    flags = _FLAGS + isa.march_flags(isa.selected()) + _openmp_link_flags() + (flags or [])
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]  # what the source may include
    identity = [source.read_bytes(), *headers, " ".join(flags).encode(), compiler.encode(), _cpu_identity()]
    digest = hashlib.sha256(b"\0".join(identity)).hexdigest()[:16]
    folder = user_cache_dir() / "kernels"
    if not directory_accepts_writes(folder):  # a private folder, never a shared one another user could fill
        folder = Path(tempfile.mkdtemp(prefix="inferd-kernels-"))
    built = folder / f"{source.stem}-{digest}.so"
    if not built.exists():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _compile(compiler, source, flags, built)
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", "") or error
            log.warning("cannot build the native kernel %s (%s); using torch's kernels", source.name, detail)
            return None
    try:
        return ctypes.CDLL(str(built))
    except OSError as error:
        log.warning("cannot load the native kernel %s (%s); using torch's kernels", built, error)
        return None


def _compile(compiler: str, source: Path, flags: list[str], target: Path) -> None:
    # Built beside the target and renamed into place, so a concurrent start never loads half a file.
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        subprocess.run([compiler, *flags, "-o", str(partial), str(source)], check=True, capture_output=True,
                       text=True, timeout=120)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _openmp_link_flags() -> list[str]:
    """Link torch's own libgomp where it ships one (the loader then reuses the
    copy torch has loaded); otherwise the system's."""
    torch_lib = Path(torch.__file__).parent / "lib"
    bundled = sorted(torch_lib.glob("libgomp*.so*"))
    if not bundled:
        return []
    return [f"-L{torch_lib}", f"-l:{bundled[0].name}", f"-Wl,-rpath,{torch_lib}"]


def _cpu_identity() -> bytes:
    """What `-march=native` depends on."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return os.uname().machine.encode()
    return "\n".join(sorted({line for line in lines if line.startswith(("flags", "model name"))})).encode()
