"""The process bounds that keep a server's memory flat: oneDNN's and torch's
matmul primitive caches are capped unless the operator set them, and a step's
temporaries stay in glibc's heap (benchmarks/soak.py measures the effect)."""

from __future__ import annotations

import ctypes
import os

import pytest

from inferd.models import process_memory


def test_the_onednn_primitive_cache_is_capped_unless_set(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    process_memory.bound_process_memory()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    process_memory.bound_process_memory()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"


def test_the_packed_matmul_cache_is_capped_unless_set(monkeypatch):
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    process_memory.bound_process_memory()
    assert os.environ["LRU_CACHE_CAPACITY"] == "256"
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "1024")
    process_memory.bound_process_memory()
    assert os.environ["LRU_CACHE_CAPACITY"] == "1024"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _glibc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        pytest.skip("glibc 2.33 or later only")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def test_a_steps_temporaries_come_from_the_heap_and_only_huge_blocks_are_mapped():
    libc = _glibc()
    process_memory.bound_process_memory()
    for size, mapped in ((8 << 20, False), (process_memory.MMAP_THRESHOLD_BYTES + (1 << 20), True)):
        before = libc.mallinfo2().hblkhd
        block = libc.malloc(size)
        try:
            assert (libc.mallinfo2().hblkhd > before) is mapped, size
        finally:
            libc.free(block)
