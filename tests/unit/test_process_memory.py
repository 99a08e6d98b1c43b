"""The process bounds that keep a server's memory flat: oneDNN's and torch's
matmul primitive caches are capped unless the operator set them
(benchmarks/soak.py measures the effect)."""

from __future__ import annotations

import os

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
