"""A Prometheus registry read as JSON: the very samples /metrics renders,
shaped for a page to plot.

    {"gauges": {name: value | [{"labels": {...}, "value": v}, ...]},
     "counters": {name: ...the same...},
     "histograms": {name: {"count", "sum", "p50", "p90", "p99", "buckets": [[le, cumulative], ...]}}}

A family without labels is a number; with labels, a list of its series.
Percentiles are interpolated inside the cumulative buckets, as Prometheus's
histogram_quantile does; they cover the whole life of the process (the page
takes differences between polls when it wants a window).
"""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry

QUANTILES = (0.5, 0.9, 0.99)


def registry_stats(registry: CollectorRegistry) -> dict:
    gauges: dict = {}
    counters: dict = {}
    histograms: dict = {}
    for family in registry.collect():
        if family.type == "gauge":
            gauges[family.name] = _series(family, family.name)
        elif family.type == "counter":
            counters[family.name] = _series(family, family.name + "_total")
        elif family.type == "histogram" and not _labelled(family):
            histograms[family.name] = _histogram(family)
    return {"gauges": gauges, "counters": counters, "histograms": histograms}


def _labelled(family) -> bool:
    return any(set(s.labels) - {"le"} for s in family.samples)


def _series(family, sample_name: str):
    samples = [s for s in family.samples if s.name == sample_name]
    if not any(s.labels for s in samples):
        return _number(samples[0].value) if samples else 0
    return [{"labels": dict(s.labels), "value": _number(s.value)} for s in samples]


def _histogram(family) -> dict:
    buckets, count, total = [], 0.0, 0.0
    for s in family.samples:
        if s.name.endswith("_bucket"):
            buckets.append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            count = s.value
        elif s.name.endswith("_sum"):
            total = s.value
    buckets.sort()
    body = {"count": _number(count), "sum": _number(total)}
    for q in QUANTILES:
        body[f"p{round(q * 100)}"] = quantile(q, buckets)
    body["buckets"] = [[("+Inf" if math.isinf(le) else le), _number(n)] for le, n in buckets]
    return body


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets, linear inside
    a bucket; None with no observations. A quantile in the +Inf bucket is the
    highest finite bound (there is nothing to interpolate toward)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower_bound
            if cumulative == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cumulative - lower_count)
        lower_bound, lower_count = bound, cumulative
    return lower_bound


def _number(value: float) -> float | int | None:
    value = float(value)
    if not math.isfinite(value):  # JSON has no NaN or infinity
        return None
    return int(value) if value.is_integer() else value
