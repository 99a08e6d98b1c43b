"""A least-recently-used cache bounded both by its number of entries and by the
total size the caller assigns them, so a stream of distinct grammars cannot
grow memory without end (unbounded grammar caches are a known CVE class)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class BoundedLruCache(Generic[Key, Value]):
    """Thread-safe: the API handlers validate while the engine builds constraints."""

    def __init__(self, max_entries: int, max_bytes: int):
        if max_entries < 1 or max_bytes < 0:
            raise ValueError(
                f"a grammar cache needs max_entries >= 1 and max_bytes >= 0 (got {max_entries}, {max_bytes})"
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, tuple[Value, int]] = OrderedDict()
        self._total_bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Key) -> Value | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Key, value: Value, size_bytes: int) -> None:
        """Keep `value`, evicting the least recently used entries until both bounds hold.
        A value larger than the whole byte budget is not kept at all."""
        if size_bytes > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._total_bytes -= previous[1]
            self._entries[key] = (value, size_bytes)
            self._total_bytes += size_bytes
            while len(self._entries) > self.max_entries or self._total_bytes > self.max_bytes:
                _, (_, evicted_size) = self._entries.popitem(last=False)
                self._total_bytes -= evicted_size

    def discard(self, key: Key, value: Value) -> None:
        """Drop `key` if it still holds `value` (not a newer value put since)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is value:
                del self._entries[key]
                self._total_bytes -= entry[1]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total_bytes
