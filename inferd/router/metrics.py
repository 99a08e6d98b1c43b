"""Prometheus metrics of one router, in a registry of its own.

Counts (routed requests, retries, predicted cache hits) are recorded as
requests pass; per-worker gauges (breaker state, in-flight) are read from
the fleet at scrape time, so a worker that left stops being reported.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferd.router.fleet import Fleet

BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}
MATCH_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class FleetCollector(Collector):
    def __init__(self, fleet: Fleet):
        self.fleet = fleet

    def collect(self) -> Iterator[Metric]:
        workers = list(self.fleet.workers.values())
        breaker = GaugeMetricFamily("inferd_router_breaker_state",
                                    "circuit breaker per worker: 0 closed, 1 half-open, 2 open", labels=["worker"])
        in_flight = GaugeMetricFamily("inferd_router_in_flight", "requests this router has open per worker",
                                      labels=["worker"])
        ready = GaugeMetricFamily("inferd_router_worker_ready", "1 while the worker's health says ready",
                                  labels=["worker"])
        for w in workers:
            breaker.add_metric([w.id], BREAKER_STATES.get(w.breaker.state, 2))
            in_flight.add_metric([w.id], w.in_flight)
            ready.add_metric([w.id], 1 if w.ready else 0)
        yield breaker
        yield in_flight
        yield ready
        yield GaugeMetricFamily("inferd_router_workers_routable", "workers that may take a request now",
                                value=sum(1 for w in workers if w.routable))


class RouterMetrics:
    def __init__(self, fleet: Fleet):
        self.registry = CollectorRegistry()
        self.routed = Counter("inferd_router_requests", "requests routed, per worker and policy decision",
                              ["worker", "reason"], registry=self.registry)
        self.retries = Counter("inferd_router_retries", "requests sent again to another worker, per cause",
                               ["cause"], registry=self.registry)
        self.stream_errors = Counter("inferd_router_stream_errors",
                                     "streams cut by a worker failure after bytes reached the client",
                                     registry=self.registry)
        self.predicted_hit = Histogram("inferd_router_predicted_cache_hit",
                                       "fraction of the prompt the policy expected cached on the chosen worker",
                                       buckets=MATCH_BUCKETS, registry=self.registry)
        self.registry.register(FleetCollector(fleet))

    def on_routed(self, worker_id: str, reason: str, matched: float) -> None:
        self.routed.labels(worker_id, reason).inc()
        self.predicted_hit.observe(matched)

    def render(self) -> bytes:
        return generate_latest(self.registry)
