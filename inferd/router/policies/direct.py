"""direct: the client (or a gateway in front) names the worker.

The `x-worker-id` header (or `x-worker-instance-id`, the name in the fleet
design this router follows) names the worker by id; without it the request goes
to the fallback policy (least-load unless told otherwise), which also sees
every routed and finished request, so its view stays current either way.

    DirectTargetError            the header names a worker that cannot take it
      ├─ UnknownWorkerError      no such worker in the fleet (400: fix the header)
      └─ WorkerUnavailableError  known, but not a candidate now (503: retry later);
                                 also a NoWorkerError, so a router that only
                                 knows that type still answers 503
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from inferd.router.policies.base import Decision, NoWorkerError, Policy, RoutingRequest
from inferd.router.policies.least_load import LeastLoadPolicy
from inferd.router.worker import Worker

HEADER = "x-worker-id"
HEADERS = (HEADER, "x-worker-instance-id")  # either names the worker; the first given wins


def named_worker(headers: Mapping[str, str]) -> tuple[str, str]:
    """(header, worker id) of the request's direct-routing header; ("", "") when it has none."""
    for name in HEADERS:
        if wanted := headers.get(name, "").strip():
            return name, wanted
    return "", ""


class DirectTargetError(LookupError):
    status = 503

    def __init__(self, worker_id: str, message: str):
        super().__init__(message)
        self.worker_id = worker_id


class UnknownWorkerError(DirectTargetError):
    status = 400


class WorkerUnavailableError(DirectTargetError, NoWorkerError):
    status = 503


class DirectPolicy:
    name = "direct"

    def __init__(self, fallback: Policy | None = None, *, lookup: Callable[[str], Worker | None] | None = None):
        """`lookup` finds a fleet member by id, routable or not; it tells an
        unknown id (400) from a known worker that cannot take the request now
        (503). Without it every miss is reported as unavailable."""
        self.fallback = fallback if fallback is not None else LeastLoadPolicy()
        self.lookup = lookup

    def choose(self, request: RoutingRequest, candidates: Sequence[Worker]) -> Decision:
        header, wanted = named_worker(request.headers)
        if not wanted:
            return self.fallback.choose(request, candidates)
        for worker in candidates:
            if worker.id == wanted:
                return Decision(worker, "direct")
        if self.lookup is not None and self.lookup(wanted) is None:
            raise UnknownWorkerError(wanted, f"{header}: no worker {wanted!r} in the fleet; GET /v1/workers lists them")
        raise WorkerUnavailableError(
            wanted,
            f"{header}: worker {wanted!r} cannot take this request now "
            "(not ready, unhealthy, serving another model, or already tried)",
        )

    def on_routed(self, request: RoutingRequest, worker: Worker) -> None:
        self.fallback.on_routed(request, worker)

    def on_finished(self, request: RoutingRequest, worker: Worker) -> None:
        self.fallback.on_finished(request, worker)

    def on_worker_removed(self, worker_id: str) -> None:
        self.fallback.on_worker_removed(worker_id)

    def cache_view(self, worker_id: str) -> Mapping:
        return self.fallback.cache_view(worker_id)
