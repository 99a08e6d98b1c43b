"""least-load: the worker with the fewest requests this router has open on it.

Load is `Worker.in_flight`, which the router keeps itself (it counts what it
sent, not what the worker reports), so it is exact for one router and needs
no polling. Ties rotate in id order after the last pick: with an idle fleet
and sequential requests every worker still gets its turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.router.policies.base import Decision, RoutingRequest, StatelessPolicy
from inferd.router.policies.round_robin import next_after
from inferd.router.worker import Worker


class LeastLoadPolicy(StatelessPolicy):
    name = "least-load"

    def __init__(self) -> None:
        self._last: str | None = None

    def pick(self, candidates: Sequence[Worker]) -> Worker:
        """The least loaded candidate; other policies use this as their fallback."""
        low = min(w.in_flight for w in candidates)
        worker = next_after([w for w in candidates if w.in_flight == low], self._last)
        self._last = worker.id
        return worker

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        return Decision(self.pick(candidates), "least-load")
