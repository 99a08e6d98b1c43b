"""The process bounds that keep a server's memory flat: oneDNN's and torch's
matmul primitive caches are capped unless the operator set them, and a step's
temporaries stay in glibc's heap (benchmarks/soak.py measures the effect)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

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


# Run in a fresh interpreter: a worker that ran other tests first may hold a free stretch of heap
# bigger than the threshold, and glibc serves a big block from there before it maps one.
_HEAP_OR_MAP = """
import ctypes, sys
from inferd.models import process_memory

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
try:
    libc.mallinfo2.restype = Mallinfo2
except AttributeError:
    sys.exit(77)  # glibc before 2.33
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
process_memory.bound_process_memory()
for size in (8 << 20, process_memory.MMAP_THRESHOLD_BYTES + (1 << 20)):
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    print(size, libc.mallinfo2().hblkhd > before)
    libc.free(block)
"""


def test_a_steps_temporaries_come_from_the_heap_and_only_huge_blocks_are_mapped():
    try:
        ctypes.CDLL("libc.so.6")
    except OSError:
        pytest.skip("glibc only")
    done = subprocess.run([sys.executable, "-c", _HEAP_OR_MAP], capture_output=True, text=True, timeout=120)
    if done.returncode == 77:
        pytest.skip("glibc 2.33 or later only")
    assert done.returncode == 0, done.stderr
    huge = process_memory.MMAP_THRESHOLD_BYTES + (1 << 20)
    assert done.stdout.split() == [str(8 << 20), "False", str(huge), "True"]
