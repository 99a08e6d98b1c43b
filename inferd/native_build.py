"""Compile a C source on first use and load it with ctypes.

Built with the system C compiler in well under a second and cached under
`$XDG_CACHE_HOME/inferd/kernels` by a hash of the source (and the headers
beside it), the flags, the compiler and the CPU, so later starts only load
it. Without a C compiler, or with `INFERD_NATIVE_KERNELS=0`, nothing is
built and callers keep their portable path.
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

from inferd.cache_files import directory_accepts_writes, user_cache_dir

log = logging.getLogger(__name__)


def native_code_enabled() -> bool:
    return os.environ.get("INFERD_NATIVE_KERNELS", "1").lower() not in ("0", "false", "no", "off")


def build_and_load(source: Path, flags: list[str], fallback: str) -> ctypes.CDLL | None:
    """The compiled `source`, or None when it cannot be built here (`fallback` says what is used instead)."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None or not native_code_enabled():
        return None
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
            log.warning("cannot build the native kernel %s (%s); %s", source.name, detail, fallback)
            return None
    try:
        return ctypes.CDLL(str(built))
    except OSError as error:
        log.warning("cannot load the native kernel %s (%s); %s", built, error, fallback)
        return None


def declare(lib: ctypes.CDLL, signatures: dict) -> ctypes.CDLL:
    """Each named function's (argument types, result type) set on `lib`."""
    for name, (argtypes, restype) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


def _compile(compiler: str, source: Path, flags: list[str], target: Path) -> None:
    # Built beside the target and renamed into place, so a concurrent start never loads half a file.
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        subprocess.run([compiler, *flags, "-o", str(partial), str(source)], check=True, capture_output=True,
                       text=True, timeout=120)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _cpu_identity() -> bytes:
    """What `-march=native` depends on."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return os.uname().machine.encode()
    return "\n".join(sorted({line for line in lines if line.startswith(("flags", "model name"))})).encode()
