"""The numbers a benchmark run produced, as a table or one JSON object."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferd.bench.client import RequestResult


@dataclass(frozen=True)
class CacheCounters:
    queries: int
    hits: int


def distribution(samples_s: list[float]) -> dict[str, float]:
    """Mean, median and p99 in milliseconds; zeros when there are no samples."""
    if not samples_s:
        return {"mean_ms": 0.0, "median_ms": 0.0, "p99_ms": 0.0}
    ms = np.asarray(samples_s, dtype=float) * 1000.0
    return {"mean_ms": float(np.mean(ms)), "median_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99))}


def summarize(results: list[RequestResult], duration: float,
              cache_before: CacheCounters | None = None, cache_after: CacheCounters | None = None) -> dict:
    done = [r for r in results if r.ok]
    output_tokens = sum(r.output_tokens for r in done)
    # TPOT excludes the first token, which TTFT already covers.
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    hit_rate = None
    if cache_before is not None and cache_after is not None:
        queries = cache_after.queries - cache_before.queries
        hit_rate = (cache_after.hits - cache_before.hits) / queries if queries > 0 else 0.0
    return {
        "completed": len(done),
        "failed": len(results) - len(done),
        "total_time_s": duration,
        "total_output_tokens": output_tokens,
        "request_throughput": len(done) / duration if duration > 0 else 0.0,
        "output_token_throughput": output_tokens / duration if duration > 0 else 0.0,
        "ttft": distribution([r.ttft for r in done]),
        "tpot": distribution(tpot),
        "itl": distribution([gap for r in done for gap in r.itl]),
        "e2e_latency": distribution([r.latency for r in done]),
        "prefix_cache_hit_rate": hit_rate,
        "errors": sorted({r.error for r in results if not r.ok})[:5],
    }


def format_report(summary: dict) -> str:
    lines = [
        "=" * 20 + " Serving Benchmark Result " + "=" * 20,
        f"{'Successful requests:':<40}{summary['completed']:>10}",
        f"{'Failed requests:':<40}{summary['failed']:>10}",
        f"{'Benchmark duration (s):':<40}{summary['total_time_s']:>10.2f}",
        f"{'Total generated tokens:':<40}{summary['total_output_tokens']:>10}",
        f"{'Request throughput (req/s):':<40}{summary['request_throughput']:>10.2f}",
        f"{'Output token throughput (tok/s):':<40}{summary['output_token_throughput']:>10.2f}",
    ]
    rate = summary["prefix_cache_hit_rate"]
    lines.append(f"{'Prefix cache hit rate:':<40}{'n/a' if rate is None else f'{rate:.2%}':>10}")
    for key, title in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e_latency", "E2E latency")):
        lines.append(f"{'-' * 20} {title} {'-' * 20}")
        for stat in ("mean", "median", "p99"):
            lines.append(f"{f'{stat.capitalize()} {title} (ms):':<40}{summary[key][f'{stat}_ms']:>10.2f}")
    for error in summary["errors"]:
        lines.append(f"error: {error}")
    lines.append("=" * 66)
    return "\n".join(lines)
