"""kv-aware (the default): send a prompt where its prefix went before,
unless that would pile work on one worker while another idles.

For each request, over the candidates, with load = `in_flight`:

1. balance: if `max_load - min_load > balance_abs` and
   `max_load > balance_rel * min_load`, the least loaded worker takes it.
2. cache-match: otherwise the worker holding the longest prefix of the
   prompt text (ties: fewer in flight, then id) takes it, if that prefix is
   more than `cache_threshold` of the text.
3. least-load: otherwise the least loaded worker takes it.

The chosen worker is then credited with the whole text in the prefix tree.

Defaults, for inferd workers decoding `--parallel` 4-16 sequences at once:

- cache_threshold 0.5: a conversation's next turn matches nearly all of its
  text (everything but the newest message), so it stays put; a prompt that
  shares only a short system prompt with earlier ones goes by load, since
  the saving is small and such common prefixes end up on every worker.
- balance_abs 8: requests past `--parallel` wait in the worker's queue. An
  excess of 8 is two full batches of waiting at --parallel 4 and half a
  batch at 16; a wait that long costs more than re-reading the prefix
  elsewhere (prompt processing runs roughly ten times faster than decode).
  Smaller gaps are noise between requests starting and ending.
- balance_rel 1.5: when every worker is busy (say 40 against 30 in flight),
  all of them queue and locality still pays; the guard then needs the
  busiest to carry half again the lightest's load.
- max_tree_chars: see `prefix_tree.DEFAULT_MAX_CHARS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inferd.router.policies.base import Decision, RoutingRequest
from inferd.router.policies.least_load import LeastLoadPolicy
from inferd.router.prefix_tree import DEFAULT_MAX_CHARS, PrefixTree
from inferd.router.worker import Worker

DEFAULT_CACHE_THRESHOLD = 0.5
DEFAULT_BALANCE_ABS = 8
DEFAULT_BALANCE_REL = 1.5


class KvAwarePolicy:
    name = "kv-aware"

    def __init__(
        self,
        *,
        cache_threshold: float = DEFAULT_CACHE_THRESHOLD,
        balance_abs: int = DEFAULT_BALANCE_ABS,
        balance_rel: float = DEFAULT_BALANCE_REL,
        max_tree_chars: int = DEFAULT_MAX_CHARS,
    ):
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"--cache-threshold must be within 0..1, got {cache_threshold}")
        if balance_abs < 0:
            raise ValueError(f"--balance-abs must be 0 or more, got {balance_abs}")
        if balance_rel < 1.0:
            raise ValueError(f"--balance-rel must be 1.0 or more, got {balance_rel}")
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.tree = PrefixTree(max_tree_chars)
        self._least = LeastLoadPolicy()

    def imbalanced(self, candidates: Sequence[Worker]) -> bool:
        loads = [w.in_flight for w in candidates]
        high, low = max(loads), min(loads)
        return high - low > self.balance_abs and high > self.balance_rel * low

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        held = self.tree.match(request.text).workers if request.text else {}

        def rate(worker: Worker) -> float:  # the share of the text it is believed to hold
            return held.get(worker.id, 0) / len(request.text) if request.text else 0.0

        if self.imbalanced(candidates):
            worker = self._least.pick(candidates)
            return Decision(worker, "balance", rate(worker))
        holders = [w for w in candidates if held.get(w.id)]
        if holders:
            best = min(holders, key=lambda w: (-held[w.id], w.in_flight, w.id))
            if rate(best) > self.cache_threshold:
                return Decision(best, "cache-match", rate(best))
        worker = self._least.pick(candidates)
        return Decision(worker, "least-load", rate(worker))

    def on_routed(self, request: RoutingRequest, worker: Worker) -> None:
        self.tree.insert(request.text, worker.id)

    def on_finished(self, request: RoutingRequest, worker: Worker) -> None:
        pass

    def on_worker_removed(self, worker_id: str) -> None:
        self.tree.remove_worker(worker_id)

    def cache_view(self, worker_id: str) -> Mapping:
        return {"policy": self.name, **self.tree.view(worker_id)}
