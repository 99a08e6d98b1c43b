"""`--dtype auto`: bf16 where the CPU computes it natively, float32 where
torch would only emulate it (an AVX2 CPU), and the choice is logged."""

from __future__ import annotations

import logging

import pytest
import torch

from inferd.kernels import isa
from inferd.models.loader import resolve_dtype

SAPPHIRE_RAPIDS = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                             "amx_bf16", "amx_tile"})
COOPER_LAKE = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"})
SKYLAKE_SERVER = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl"})
ZEN3 = frozenset({"avx2", "fma", "f16c", "bmi2"})


@pytest.fixture
def cpu(monkeypatch):
    """Pretend to be an x86 CPU with the given flags."""
    def pretend(flags: frozenset[str], build: str = "") -> None:
        monkeypatch.setattr(isa, "cpu_flags", lambda: flags)
        monkeypatch.setattr(isa.platform, "machine", lambda: "x86_64")
        monkeypatch.setenv("INFERD_ISA", build)
    return pretend


@pytest.mark.parametrize(("flags", "want"), [(SAPPHIRE_RAPIDS, torch.bfloat16), (COOPER_LAKE, torch.bfloat16),
                                             (SKYLAKE_SERVER, torch.float32), (ZEN3, torch.float32)])
def test_auto_follows_the_cpus_bf16(cpu, caplog, flags, want):
    cpu(flags)
    with caplog.at_level(logging.INFO, logger="inferd.models.loader"):
        assert resolve_dtype("auto", torch.device("cpu")) == want
    assert f"--dtype auto: {str(want).removeprefix('torch.')}" in caplog.text
    if want == torch.float32:
        assert "this CPU has no native bf16" in caplog.text


def test_a_lower_build_stands_for_the_cpus_it_is_built_for(cpu, caplog):
    cpu(SAPPHIRE_RAPIDS, "avx2")
    with caplog.at_level(logging.INFO, logger="inferd.models.loader"):
        assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert "INFERD_ISA=avx2 stands for CPUs without native bf16" in caplog.text
    cpu(SAPPHIRE_RAPIDS, "avx512")  # the CPU's own build
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16


def test_amx_counts_where_the_cpu_has_it_and_neither_the_build_nor_onednn_is_held_below_it(cpu, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    cpu(SAPPHIRE_RAPIDS)
    assert isa.amx_bf16()
    for held, amx in (("AVX512_CORE_AMX", True), ("ALL", True), ("AVX512_CORE_BF16", False), ("AVX2", False)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", held)
        assert isa.amx_bf16() is amx, held
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    cpu(SAPPHIRE_RAPIDS, "avx2")  # stands for a CPU without AMX
    assert not isa.amx_bf16()
    cpu(COOPER_LAKE)  # AVX-512 BF16, no tiles
    assert not isa.amx_bf16()


ZEN4 = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"})


def test_onednns_bf16_beats_the_blocks_on_amx_and_on_amds_avx512_bf16(cpu, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    for flags, vendor, want in ((SAPPHIRE_RAPIDS, "GenuineIntel", True), (ZEN4, "AuthenticAMD", True),
                                (COOPER_LAKE, "GenuineIntel", False), (ZEN3, "AuthenticAMD", False),
                                (SKYLAKE_SERVER, "GenuineIntel", False)):
        cpu(flags)
        assert isa.fast_bf16_matmul(vendor=vendor) is want, (sorted(flags), vendor)
    cpu(ZEN4)
    for held, want in (("AVX512_CORE_BF16", True), ("ALL", True), ("AVX512_CORE", False), ("AVX2", False)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", held)
        assert isa.fast_bf16_matmul(vendor="AuthenticAMD") is want, held
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    cpu(ZEN4, "avx2")  # stands for an AVX2 CPU
    assert not isa.fast_bf16_matmul(vendor="AuthenticAMD")


def test_the_vendor_and_flags_are_read_from_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu avx2 avx512_bf16\n")
    monkeypatch.setattr(isa, "_CPUINFO", cpuinfo)
    isa.cpu_vendor.cache_clear(), isa.cpu_flags.cache_clear()
    try:
        assert isa.cpu_vendor() == "AuthenticAMD"
        assert isa.cpu_flags() == {"fpu", "avx2", "avx512_bf16"}
        cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # Arm: no vendor_id
        isa.cpu_vendor.cache_clear(), isa.cpu_flags.cache_clear()
        assert isa.cpu_vendor() == "" and isa.cpu_flags() == {"fp", "asimd", "bf16"}
    finally:
        isa.cpu_vendor.cache_clear(), isa.cpu_flags.cache_clear()


def test_arm_with_bf16_and_without(monkeypatch):
    monkeypatch.setattr(isa.platform, "machine", lambda: "aarch64")
    monkeypatch.delenv("INFERD_ISA", raising=False)
    assert isa.native_bf16(frozenset({"fp", "asimd", "sve", "bf16"}))
    assert not isa.native_bf16(frozenset({"fp", "asimd"}))


def test_accelerators_and_named_dtypes_are_not_second_guessed(cpu):
    cpu(ZEN3)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    assert resolve_dtype("float32") == torch.float32
    with pytest.raises(ValueError, match="--dtype 'int3' is not one of: auto, bfloat16"):
        resolve_dtype("int3")


def test_a_float32_cpu_engine_keeps_its_kv_cache_in_bf16():
    """Half the memory, and decode attention in the native kernel; accelerators and bf16 keep their dtype."""
    from inferd.engine.runner import kv_cache_dtype

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert kv_cache_dtype(torch.float32, cpu) == torch.bfloat16
    assert kv_cache_dtype(torch.bfloat16, cpu) == torch.bfloat16
    assert kv_cache_dtype(torch.float32, cuda) == torch.float32
    assert kv_cache_dtype(torch.float16, cuda) == torch.float16
