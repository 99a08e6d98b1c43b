"""Paged KV-cache block pool with automatic prefix caching.

Contract
--------
- The pool owns `num_blocks` blocks of `block_size` token slots. A block is
  either *in use* (ref_count > 0, owned by one or more sequences) or *free*.
- A full block whose KV has been computed may be *cached*: registered under
  the hash of (parent block's hash, its tokens) from `inferd.prefix_hash`.
  A later prompt with the same prefix (and cache salt) takes the cached
  block (`match_prefix`) without copying: its ref_count goes up, and it
  leaves the free list if it was there.
- Freed blocks enter the free list at the tail, in the order given; cached
  blocks keep their hash while free, so they can still be hit. Allocation
  pops from the head (least recently freed first) and evicts the popped
  block's hash: that is the LRU eviction order.
- Block ids are never shared between two sequences except through
  `match_prefix`; a shared block is read-only (only full blocks are shared).
- A `listener`, when set, hears every hash as it is registered
  (`block_stored`) and as it is forgotten (`block_removed`: eviction or
  reset), in that order; the pool never depends on it otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from inferd.prefix_hash import BlockHash


class BlockListener(Protocol):
    def block_stored(self, h: BlockHash) -> None: ...

    def block_removed(self, h: BlockHash) -> None: ...


class NoFreeBlocksError(RuntimeError):
    """Raised by `allocate` when the pool cannot satisfy a request; the
    scheduler checks `num_free` first, so reaching this is a bug."""


@dataclass
class CacheStats:
    queries: int = 0  # prompt blocks looked up
    hits: int = 0  # of which found cached
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need at least one block of one slot, got {num_blocks} x {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        self.hash_of: list[BlockHash | None] = [None] * num_blocks
        self.cached: dict[BlockHash, int] = {}  # hash -> block id
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.stats = CacheStats()
        self.listener: BlockListener | None = None  # set only while someone watches (KV events)

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self.free)} free")
        blocks = []
        for _ in range(n):
            block, _ = self.free.popitem(last=False)
            self._evict(block)
            self.ref_counts[block] = 1
            blocks.append(block)
        return blocks

    def free_blocks(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each; blocks reaching zero join the free
        list in the given order (callers pass tail blocks first, so a
        sequence's prefix stays cached longest)."""
        for block in blocks:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] < 0:
                raise RuntimeError(f"block {block} freed more often than taken")
            if self.ref_counts[block] == 0:
                self.free[block] = None

    def match_prefix(self, hashes: Sequence[BlockHash]) -> list[int]:
        """Take every leading cached block of `hashes`; counts hits/misses."""
        taken = []
        for h in hashes:
            block = self.cached.get(h)
            if block is None:
                break
            if self.ref_counts[block] == 0:
                del self.free[block]
            self.ref_counts[block] += 1
            taken.append(block)
        self.stats.queries += len(hashes)
        self.stats.hits += len(taken)
        return taken

    def cache_block(self, block: int, h: BlockHash) -> None:
        """Register a full, computed block. A hash already cached elsewhere
        keeps its first block (this one stays private and uncached)."""
        if self.hash_of[block] is None and h not in self.cached:
            self.hash_of[block] = h
            self.cached[h] = block
            if self.listener is not None:
                self.listener.block_stored(h)

    def hold(self, h: BlockHash) -> int | None:
        """One more reference to the block cached under `h`, if any; not counted
        as a hit (slot files use it to keep a block while they allocate others)."""
        block = self.cached.get(h)
        if block is not None:
            if self.ref_counts[block] == 0:
                del self.free[block]
            self.ref_counts[block] += 1
        return block

    def forget(self, hashes: Sequence[BlockHash]) -> int:
        """Forget those of `hashes` cached on a free block (a block some
        sequence holds keeps its hash); returns how many were forgotten."""
        dropped = 0
        for h in hashes:
            block = self.cached.get(h)
            if block is not None and self.ref_counts[block] == 0:
                self._evict(block, count=False)
                dropped += 1
        return dropped

    def reset_prefix_cache(self) -> int:
        """Forget every cached hash of a free block; returns how many."""
        dropped = 0
        for block in list(self.free):
            if self.hash_of[block] is not None:
                self._evict(block, count=False)
                dropped += 1
        return dropped

    def _evict(self, block: int, count: bool = True) -> None:
        h = self.hash_of[block]
        if h is not None:
            del self.cached[h]
            self.hash_of[block] = None
            if count:
                self.stats.evictions += 1
            if self.listener is not None:
                self.listener.block_removed(h)
