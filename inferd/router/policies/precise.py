"""precise: route by the KV blocks each inferd worker says it holds.

The prompt's tokens are cut into the worker's blocks and hashed as the
worker hashes them (`inferd.prefix_hash`, salted with the body's
`cache_salt` when it is a string); the worker's
`KvIndex` entry, fed by its `/v1/kv-events` stream, says how many leading
blocks it already holds. For each candidate:

    cost = kv_overlap_weight * (prompt_blocks - overlap) + active_blocks

the blocks it would have to compute, plus the blocks its running sequences
occupy; the lowest cost wins (ties: fewer in flight, then id). A weight of
1.0 (the default) values a block to prefill as much as a block of someone
else's work already there; raise it to favour locality, lower it to favour
spreading.

The fallback policy (kv-aware text matching unless told otherwise) decides
when this cannot be judged fairly:
- `token_ids` is None: the router has no tokenizer for the model and the
  prompt was not sent as token ids;
- a candidate has no KV view (not an inferd worker with the kv-events
  capability, or its stream is reconnecting): scoring only the workers with
  a view would make the rest look either idle or never worth choosing.
The fallback also sees every routed request, so it is warm when needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from inferd.prefix_hash import prefix_block_hashes, root_hash
from inferd.router.kv_index import KvIndex
from inferd.router.policies.base import Decision, Policy, RoutingRequest
from inferd.router.policies.kv_aware import KvAwarePolicy
from inferd.router.worker import Worker

DEFAULT_KV_OVERLAP_WEIGHT = 1.0


class PrecisePolicy:
    name = "precise"

    def __init__(
        self,
        *,
        index: KvIndex | None = None,
        kv_overlap_weight: float = DEFAULT_KV_OVERLAP_WEIGHT,
        fallback: Policy | None = None,
    ):
        if kv_overlap_weight < 0:
            raise ValueError(f"--kv-overlap-weight must be 0 or more, got {kv_overlap_weight}")
        self.index = index if index is not None else KvIndex()
        self.kv_overlap_weight = kv_overlap_weight
        self.fallback = fallback if fallback is not None else KvAwarePolicy()

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        entries = [self.index.get(w.id) for w in candidates]
        if request.token_ids is None or any(e is None for e in entries):
            return self.fallback.choose(request, candidates)
        salt = request.body.get("cache_salt")
        root = root_hash(salt if isinstance(salt, str) else None)
        try:  # the prompt's hash chain for each block size
            chains = {size: prefix_block_hashes(request.token_ids, size, parent=root)
                      for size in {e.block_size for e in entries}}
        except ValueError:  # token ids no worker accepts: it will answer with the error
            return self.fallback.choose(request, candidates)
        best = None
        for worker, entry in zip(candidates, entries):
            chain = chains[entry.block_size]
            overlap = self.index.overlap(worker.id, chain)
            cost = self.kv_overlap_weight * (len(chain) - overlap) + entry.active_blocks
            key = (cost, worker.in_flight, worker.id)
            if best is None or key < best[0]:
                best = (key, worker, overlap / len(chain) if chain else 0.0)
        _, worker, matched = best
        return Decision(worker, "kv-cost", matched)

    def on_routed(self, request: RoutingRequest, worker: Worker) -> None:
        self.fallback.on_routed(request, worker)
        entry = self.index.get(worker.id)
        if entry is not None and request.token_ids is not None:
            self.index.note_routed(worker.id, math.ceil(len(request.token_ids) / entry.block_size))

    def on_finished(self, request: RoutingRequest, worker: Worker) -> None:
        self.fallback.on_finished(request, worker)

    def on_worker_removed(self, worker_id: str) -> None:
        self.index.forget(worker_id)
        self.fallback.on_worker_removed(worker_id)

    def cache_view(self, worker_id: str) -> Mapping:
        return {"policy": self.name, **self.index.view(worker_id), "fallback": self.fallback.cache_view(worker_id)}
