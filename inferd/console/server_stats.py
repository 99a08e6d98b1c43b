"""What `inferd serve`'s dashboard shows: its metrics registry (with
--metrics) and, per chat model loaded now, the engine's own counters, read
from the same `EngineStats` /metrics reads, so tokens per second and the
gauges are there per model even without --metrics.

Reads the server's state by its attributes only, so this package stays free
of the engine and of torch."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from inferd.console.stats import registry_stats

if TYPE_CHECKING:
    from inferd.serving.state import ServerState

ENGINE_FIELDS = ("running", "waiting", "max_running", "kv_blocks_used", "kv_blocks_total", "prefix_cache_queries",
                 "prefix_cache_hits", "prompt_tokens_total", "tokens_computed_total", "generation_tokens_total",
                 "preemptions", "steps")


def server_stats(state: ServerState) -> dict:
    metrics = state.metrics
    body = {"object": "stats", "role": "server", "time": time.time(), "uptime": time.time() - state.started,
            "metrics": metrics is not None, "models": _models(state)}
    body.update(registry_stats(metrics.registry) if metrics is not None else
                {"gauges": {}, "counters": {}, "histograms": {}})
    return body


def _models(state: ServerState) -> list[dict]:
    models = []
    if state.engine is not None:  # the server's own model, outside any request's choice
        models.append(engine_view(state.model_name, state.engine.stats()))
    host = state.host
    if host is not None:
        for hosted in host.loaded():
            engine = hosted.chat.engine if hosted.chat is not None else None
            if engine is not None:
                models.append(engine_view(hosted.name, engine.stats()))
    return models


def engine_view(name: str, stats) -> dict:
    view = {"name": name, **{f: getattr(stats, f) for f in ENGINE_FIELDS}}
    view["kv_usage"] = stats.kv_usage
    view["prefix_cache_hit_rate"] = stats.prefix_cache_hit_rate
    return view
