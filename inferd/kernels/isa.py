"""Which instruction set the native kernels are built for.

By default the best the CPU has (`-march=native`). `INFERD_ISA` picks a
lower one, so a machine can run and measure the builds that machines below
it get: `avx512` (this CPU's own), `avx2` (x86-64-v3: AVX2, FMA, F16C, the
common x86 server and desktop since 2013) or `portable` (the baseline of the
architecture: scalar C the compiler may vectorize).
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

ISAS = ("avx512", "avx2", "portable")  # best first
_CPUINFO = Path("/proc/cpuinfo")

_REQUIRED_FLAGS = {
    "avx512": {"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"},
    "avx2": {"avx2", "fma", "f16c", "bmi2"},
    "portable": set(),
}


class IsaError(ValueError):
    """INFERD_ISA names an instruction set this CPU cannot run, or none at all."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    flags = _cpuinfo_field(("flags", "Features"))
    return frozenset(flags.split()) if flags else frozenset()


@functools.cache
def cpu_vendor() -> str:
    """x86's vendor_id ("GenuineIntel", "AuthenticAMD"), or "" elsewhere."""
    return _cpuinfo_field(("vendor_id",)) or ""


def _cpuinfo_field(names: tuple[str, ...]) -> str | None:
    try:
        for line in _CPUINFO.read_text().splitlines():
            if line.startswith(names):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def runnable() -> tuple[str, ...]:
    """The builds this CPU can run, best first."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ("portable",)
    flags = cpu_flags()
    return tuple(isa for isa in ISAS if _REQUIRED_FLAGS[isa] <= flags)


def selected() -> str:
    """INFERD_ISA, checked against the CPU, or the best build it can run."""
    wanted = os.environ.get("INFERD_ISA", "").strip().lower()
    if not wanted:
        return runnable()[0]
    if wanted not in ISAS:
        raise IsaError(f"INFERD_ISA={wanted!r} is not one of: {', '.join(ISAS)}")
    if wanted not in runnable():
        raise IsaError(f"INFERD_ISA={wanted} needs instructions this CPU lacks; it can run: {', '.join(runnable())}")
    return wanted


# Instructions that compute bf16 products natively: x86's AVX512-BF16 and AMX-BF16, Arm's BF16.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether the build in use runs on a CPU that computes bf16 natively.
    Without it torch and oneDNN only emulate bf16 matmuls, several times
    slower than float32's. A lower build chosen with INFERD_ISA stands for
    the machines it is built for, which have none (`avx2`, `portable`)."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags & NATIVE_BF16_FLAGS) and selected() == runnable()[0]


def amx_bf16(flags: frozenset[str] | None = None) -> bool:
    """Whether bf16 matrix products run on AMX tiles: the CPU has them, the
    build in use is its own, and oneDNN is not held below them
    (ONEDNN_MAX_CPU_ISA, which can make this machine stand for one without)."""
    flags = cpu_flags() if flags is None else flags
    return "amx_bf16" in flags and selected() == runnable()[0] and _onednn_reaches("AMX")


def fast_bf16_matmul(flags: frozenset[str] | None = None, vendor: str | None = None) -> bool:
    """Whether oneDNN's bf16 matrix products compute a prompt faster than the
    integer products over a GGUF's blocks: on AMX tiles, or on AMD's
    AVX512-BF16 (Zen 4 on: 1.2-1.4x faster than the blocks, bundled model,
    2 cores). Intel's AVX512-BF16 without the tiles is 1.7x slower than the
    blocks (BENCHMARKS.md, sessions 14 and 18). As for `amx_bf16`, the build
    in use must be the CPU's own and oneDNN not held below bf16."""
    flags = cpu_flags() if flags is None else flags
    vendor = cpu_vendor() if vendor is None else vendor
    if amx_bf16(flags):
        return True
    return (vendor == "AuthenticAMD" and "avx512_bf16" in flags and selected() == runnable()[0]
            and _onednn_reaches("BF16", "AMX"))


def _onednn_reaches(*names: str) -> bool:
    """ONEDNN_MAX_CPU_ISA is unset, or holds oneDNN at an ISA named with one of `names`."""
    held = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return held in ("", "ALL", "DEFAULT") or any(name in held for name in names)


def march_flags(isa: str) -> list[str]:
    """The compiler flags of one build: the CPU's own for its best, so
    extensions beyond the named set (VNNI, AMX, AVX-VNNI) are used too."""
    if isa == runnable()[0]:
        return ["-march=native"]
    if isa == "avx512":
        return ["-march=x86-64-v4"]
    if isa == "avx2":
        return ["-march=x86-64-v3"]
    return ["-march=x86-64", "-mtune=generic"] if platform.machine() in ("x86_64", "AMD64") else []
