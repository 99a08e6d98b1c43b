"""The process bounds that keep a server's memory flat: oneDNN's primitive
cache is capped unless the operator set it (benchmarks/soak.py measures the effect)."""

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
