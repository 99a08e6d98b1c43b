"""A per-worker circuit breaker.

closed: traffic flows; `failure_threshold` consecutive failures open it.
open: no traffic for `cooldown` seconds, then half-open.
half-open: traffic (health probes and requests) flows again; `success_threshold`
consecutive successes close it, one failure opens it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class CircuitBreaker:
    failure_threshold: int = 3
    success_threshold: int = 2
    cooldown: float = 5.0
    state: str = "closed"  # "closed" | "open" | "half-open"
    failures: int = 0  # consecutive
    successes: int = 0  # consecutive, counted while half-open
    opened_at: float = 0.0
    clock: object = field(default=time.monotonic, repr=False)

    def allows(self) -> bool:
        if self.state == "open" and self.clock() - self.opened_at >= self.cooldown:
            self.state, self.successes = "half-open", 0
        return self.state != "open"

    def record_success(self) -> None:
        self.failures = 0
        if self.state == "half-open":
            self.successes += 1
            if self.successes >= self.success_threshold:
                self.state = "closed"
        elif self.state == "open":
            # A success seen while open (a probe raced the cooldown) starts recovery.
            self.state, self.successes = "half-open", 1

    def record_failure(self) -> None:
        self.failures += 1
        self.successes = 0
        if self.state == "half-open" or self.failures >= self.failure_threshold:
            if self.state != "open":
                self.opened_at = self.clock()
            self.state = "open"
