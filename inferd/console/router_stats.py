"""What `inferd router`'s dashboard shows: its metrics registry (routed
requests, retries, per-worker in-flight and breaker) and the fleet in brief.

Reads the router's state by its attributes only."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from inferd.console.stats import registry_stats

if TYPE_CHECKING:
    from inferd.router.state import RouterState


def router_stats(state: RouterState) -> dict:
    metrics = state.metrics
    workers = list(state.fleet.workers.values())
    body = {"object": "stats", "role": "router", "time": time.time(), "metrics": metrics is not None,
            "workers": [{"id": w.id, "state": w.state, "in_flight": w.in_flight, "breaker": w.breaker.state}
                        for w in workers]}
    body.update(registry_stats(metrics.registry) if metrics is not None else
                {"gauges": {}, "counters": {}, "histograms": {}})
    return body
