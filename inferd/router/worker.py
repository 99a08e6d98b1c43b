"""One worker as the router sees it: where it is, what it serves, how busy it is."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.router.breaker import CircuitBreaker


@dataclass
class Worker:
    id: str  # stable: the etcd key's last part, or the URL for a static worker
    url: str  # base URL without a trailing slash, e.g. http://10.0.0.5:8080
    model: str | None = None  # the served model id; None = unknown (answers any)
    parallel: int | None = None  # sequences it decodes together, when it says
    block_size: int | None = None  # KV-cache block size (inferd workers)
    capabilities: frozenset[str] = frozenset()  # e.g. {"kv-events"}
    source: str = "static"  # "static" | "etcd"
    in_flight: int = 0  # requests this router has open on it
    ready: bool = True  # false while its /health says loading or draining
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)

    @property
    def routable(self) -> bool:
        return self.ready and self.breaker.allows()

    @property
    def healthy(self) -> bool:
        """Ready, with a closed breaker: a worker on probation (half-open) takes
        traffic to prove itself, but is not counted as healthy until it has."""
        return self.ready and self.breaker.allows() and self.breaker.state == "closed"

    @property
    def state(self) -> str:
        if not self.breaker.allows():
            return "unhealthy"
        return "ready" if self.ready else "not-ready"
