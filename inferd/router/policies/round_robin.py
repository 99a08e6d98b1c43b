"""round-robin: each request to the next worker in id order.

The rotation follows the last chosen id rather than a counter, so it stays
fair when the candidate set changes between requests (a worker retried
away, one joining or leaving): the next pick is the first id after the last.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.router.policies.base import Decision, RoutingRequest, StatelessPolicy
from inferd.router.worker import Worker


def next_after(workers: Sequence[Worker], last_id: str | None) -> Worker:
    """The worker whose id follows `last_id` in sorted order, wrapping around."""
    ordered = sorted(workers, key=lambda w: w.id)
    if last_id is not None:
        for worker in ordered:
            if worker.id > last_id:
                return worker
    return ordered[0]


class RoundRobinPolicy(StatelessPolicy):
    name = "round-robin"

    def __init__(self) -> None:
        self._last: str | None = None

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        worker = next_after(candidates, self._last)
        self._last = worker.id
        return Decision(worker, "round-robin")
