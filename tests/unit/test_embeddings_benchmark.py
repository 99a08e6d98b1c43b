"""benchmarks/embeddings.py: the header names the instruction-set limits a run
is held to (the CPU's flags alone do not say which kernels ran)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "embeddings.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("embeddings_benchmark", BENCH_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def test_held_to_names_every_limit_set_in_order():
    environ = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "INFERD_ISA": "avx2",
               "MKL_ENABLE_INSTRUCTIONS": "AVX2", "PATH": "/bin"}
    assert bench.held_to(environ) == ("ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
                                      "ONEDNN_MAX_CPU_ISA=AVX2 INFERD_ISA=avx2")


def test_held_to_leaves_out_unset_and_blank_limits():
    assert bench.held_to({"ONEDNN_MAX_CPU_ISA": "AVX2", "INFERD_ISA": " "}) == "ONEDNN_MAX_CPU_ISA=AVX2"


def test_held_to_says_none_without_limits():
    assert bench.held_to({"PATH": "/bin"}) == "none"


def test_load_average_is_three_numbers():
    assert len([float(v) for v in bench.load_average().split()]) == 3
