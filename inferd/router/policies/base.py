"""The interface every routing policy implements.

The router calls `choose` with the request and the workers that may take it
(routable, serving the requested model, minus any already tried), then
`on_routed` once the request is sent, and `on_finished` when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from inferd.router.worker import Worker


@dataclass
class RoutingRequest:
    path: str  # e.g. /v1/chat/completions
    body: Mapping  # the parsed JSON body ({} when none)
    text: str  # the prompt as text: what prefix locality is judged on
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-cased names
    token_ids: list[int] | None = None  # the rendered prompt's tokens, when the router has a tokenizer


@dataclass
class Decision:
    worker: Worker
    reason: str  # why: "round-robin", "least-load", "cache-match", "balance", "direct", "kv-cost", ...
    matched: float = 0.0  # fraction of the prompt the policy believes is cached there (0..1)


class NoWorkerError(LookupError):
    """No candidate can take the request (the router answers 503)."""


class Policy(Protocol):
    name: str

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        """Pick one of `candidates` (never empty)."""

    def on_routed(self, request: RoutingRequest, worker: Worker) -> None:
        """The request was sent to `worker`."""

    def on_finished(self, request: RoutingRequest, worker: Worker) -> None:
        """The request ended on `worker` (success or not)."""

    def on_worker_removed(self, worker_id: str) -> None:
        """Forget what is known about a worker that left the fleet."""

    def cache_view(self, worker_id: str) -> Mapping:
        """What the policy believes `worker_id` holds, for /v1/admin/cache-view."""


class StatelessPolicy:
    """Hooks for a policy that learns nothing from where requests went."""

    name: str

    def on_routed(self, request: RoutingRequest, worker: Worker) -> None:
        pass

    def on_finished(self, request: RoutingRequest, worker: Worker) -> None:
        pass

    def on_worker_removed(self, worker_id: str) -> None:
        pass

    def cache_view(self, worker_id: str) -> Mapping:
        return {"policy": self.name}
