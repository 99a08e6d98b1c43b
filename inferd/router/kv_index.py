"""What each inferd worker's KV cache holds, mirrored from its event stream.

A worker streams NDJSON from `GET /v1/kv-events`, one event a line:

    {"type": "snapshot", "block_size": 16, "hashes": [...], "active_blocks": N}
        the whole cache; replaces whatever was known (always the first line)
    {"type": "update", "stored": [...], "removed": [...], "active_blocks": N}
        changes since the last line; `removed` applies before `stored`
    {"type": "ping", "active_blocks": N}
        keepalive; carries the load only

Hashes are the worker's prefix hash chain (`inferd.prefix_hash`), strings
of 32 hex digits: a block's hash covers every token before it, so the
cached part of a prompt is the leading run of its block hashes that the
worker holds.
`active_blocks` (blocks in use by running sequences) is the worker's load.
Unknown event types are skipped, so workers may add new ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferd.prefix_hash import HASH_HEX_DIGITS, BlockHash

log = logging.getLogger(__name__)


class KvEventError(ValueError):
    """A malformed event, or one that needs a snapshot first."""


@dataclass
class WorkerKv:
    block_size: int
    hashes: set[BlockHash] = field(default_factory=set)
    active_blocks: int = 0
    events: int = 0  # lines applied since the snapshot, pings included


def _count(event: Mapping, key: str, default: int | None = None) -> int:
    value = event.get(key, default)
    if type(value) is not int or value < 0:
        raise KvEventError(f"kv event {event.get('type')!r}: {key!r} must be a non-negative integer, got {value!r}")
    return value


def _hashes(event: Mapping, key: str) -> list[BlockHash]:
    value = event.get(key, [])
    # Length and type only: a malformed hash just never matches a prompt's chain.
    if not isinstance(value, list) or any(type(h) is not str or len(h) != HASH_HEX_DIGITS for h in value):
        raise KvEventError(
            f"kv event {event.get('type')!r}: {key!r} must be a list of block hashes ({HASH_HEX_DIGITS} hex digits)"
        )
    return value


class KvIndex:
    def __init__(self) -> None:
        self._workers: dict[str, WorkerKv] = {}

    def apply(self, worker_id: str, event: Mapping) -> None:
        if not isinstance(event, Mapping):
            raise KvEventError(f"kv event must be a JSON object, got {type(event).__name__}")
        kind = event.get("type")
        if kind == "snapshot":
            block_size = _count(event, "block_size")
            if block_size == 0:
                raise KvEventError("kv event 'snapshot': 'block_size' must be at least 1")
            self._workers[worker_id] = WorkerKv(
                block_size, set(_hashes(event, "hashes")), _count(event, "active_blocks", 0)
            )
            return
        if kind not in ("update", "ping"):
            log.debug("worker %s: skipped kv event of type %r", worker_id, kind)
            return
        entry = self._workers.get(worker_id)
        if entry is None:
            raise KvEventError(f"kv event {kind!r} from worker {worker_id!r} before its snapshot")
        active = _count(event, "active_blocks", entry.active_blocks)
        if kind == "update":  # both lists checked before either applies
            removed, stored = _hashes(event, "removed"), _hashes(event, "stored")
            entry.hashes.difference_update(removed)
            entry.hashes.update(stored)
        entry.active_blocks = active
        entry.events += 1

    def forget(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    def get(self, worker_id: str) -> WorkerKv | None:
        return self._workers.get(worker_id)

    def __contains__(self, worker_id: str) -> bool:
        return worker_id in self._workers

    def overlap(self, worker_id: str, hashes: Sequence[BlockHash]) -> int:
        """How many leading blocks of the chain `hashes` the worker holds."""
        entry = self._workers.get(worker_id)
        if entry is None:
            return 0
        held = entry.hashes
        for n, h in enumerate(hashes):
            if h not in held:
                return n
        return len(hashes)

    def note_routed(self, worker_id: str, blocks: int) -> None:
        """Count blocks a request just sent will occupy, until the worker's
        next event reports its real load: without it, a burst arriving
        between two events would all see the same idle worker."""
        entry = self._workers.get(worker_id)
        if entry is not None:
            entry.active_blocks += blocks

    def view(self, worker_id: str) -> dict:
        entry = self._workers.get(worker_id)
        if entry is None:
            return {"synced": False}
        return {
            "synced": True,
            "block_size": entry.block_size,
            "blocks": len(entry.hashes),
            "active_blocks": entry.active_blocks,
            "events": entry.events,
        }
