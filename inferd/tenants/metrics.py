"""Per-key Prometheus counters, in the registry of the app that serves them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from inferd.tenants.store import UsageRow


class KeyMetrics:
    def __init__(self, registry: CollectorRegistry):
        labels = ["key", "model"]
        self.requests = Counter("inferd_key_requests", "generating requests answered, by API key and model",
                                labels, registry=registry)
        self.errors = Counter("inferd_key_errors", "generating requests that ended in an error, by API key and model",
                              labels, registry=registry)
        self.tokens = Counter("inferd_key_tokens", "tokens by API key, model and kind (prompt, completion, cached)",
                              [*labels, "kind"], registry=registry)
        self.refused = Counter("inferd_key_refused", "requests refused at admission, by API key and reason",
                               ["key", "reason"], registry=registry)

    def record(self, row: UsageRow) -> None:
        self.requests.labels(row.key, row.model).inc(row.requests)
        if row.errors:
            self.errors.labels(row.key, row.model).inc(row.errors)
        for kind in ("prompt", "completion", "cached"):
            self.tokens.labels(row.key, row.model, kind).inc(getattr(row, f"{kind}_tokens"))
