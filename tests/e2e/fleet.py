"""A worker fleet for end-to-end router tests: `inferd serve` processes on
the tiny model, registered in a real etcd under one key prefix, which
`inferd router --etcd` replicas watch.

    model = long_context_model(tiny_model_dir, tmp / "tiny-4k")
    workers = start_all([registered_worker(model, etcd, PREFIX, logs / f"w{i}.log") for i in range(3)])
    router = RouterProcess(etcd=etcd.address, etcd_prefix=PREFIX, wait_workers=3).start()

The tiny model decodes several hundred tokens a second, so a request that
must still be running when a test acts on it (a kill, a drain, a flood)
needs a long output; `long_context_model` copies the tiny model with room
for FLEET_CTX positions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server import ServerProcess

FLEET_CTX = 4096  # positions of the long-context copy, and each worker's --ctx-size
TTL = 3  # seconds of each worker's etcd lease (--register-ttl)


def long_context_model(source: Path, target: Path, positions: int = FLEET_CTX) -> Path:
    """A copy of a tiny model folder whose config allows `positions` positions (RoPE needs no more)."""
    shutil.copytree(source, target, dirs_exist_ok=True)
    config_path = target / "config.json"
    config = json.loads(config_path.read_text())
    config["max_position_embeddings"] = positions
    config_path.write_text(json.dumps(config))
    return target


def registered_worker(model: Path, etcd, prefix: str, log_path: Path, *, parallel: int = 4,
                      ctx_size: int = FLEET_CTX, ttl: float = TTL, **kwargs) -> ServerProcess:
    """An unstarted worker that registers itself under `prefix` once it serves."""
    return ServerProcess(
        model, parallel=parallel, ctx_size=ctx_size, log_path=log_path,
        extra_args=["--register", etcd.address, "--register-ttl", str(ttl), "--register-prefix", prefix], **kwargs,
    )


def worker_id(server: ServerProcess) -> str:
    """The id a worker registers under: its advertised URL's host and port (registration.worker_id_for)."""
    return f"{server.host}-{server.port}"


def start_all(servers: Iterable) -> list:
    """Start processes (ServerProcess, RouterProcess) side by side; if any fails, kill every one and raise."""
    servers = list(servers)
    with ThreadPoolExecutor(len(servers)) as pool:
        futures = [pool.submit(s.start) for s in servers]
        errors = [f.exception() for f in futures]
    failed = [e for e in errors if e is not None]
    if failed:
        for s in servers:
            s.kill()
        raise failed[0]
    return servers


def stop_all(servers: Iterable) -> None:
    """SIGTERM each process (a ServerProcess or RouterProcess); one that ignores it is killed, and
    once every one is down the first such refusal is raised (with its log tail)."""
    refused = []
    for s in servers:
        try:
            s.stop(timeout=20)
        except RuntimeError as e:  # ServerStartError / RouterStartError: stop() has killed it
            refused.append(e)
    if refused:
        raise refused[0]


def fleet_ids(router) -> set[str]:
    """The worker ids a router lists in GET /v1/workers."""
    return {w["id"] for w in router.fleet()}


def cache_counters(workers: Iterable[ServerProcess]) -> tuple[int, int]:
    """(prefix_cache_queries, prefix_cache_hits) summed over the workers' GET /v1/cache/stats."""
    queries = hits = 0
    for w in workers:
        with w.http(timeout=10.0) as client:
            stats = client.get("/v1/cache/stats").json()
        queries += stats["prefix_cache_queries"]
        hits += stats["prefix_cache_hits"]
    return queries, hits


def reset_caches(workers: Iterable[ServerProcess]) -> None:
    """POST /v1/cache/reset on each worker: every cached prefix is forgotten (the counters stay)."""
    for w in workers:
        with w.http(timeout=10.0) as client:
            r = client.post("/v1/cache/reset")
            r.raise_for_status()


def router_metric(router, name: str, labels: dict[str, str] | None = None) -> float:
    """The sum of a router's Prometheus samples called `name` whose labels include `labels`."""
    with router.http(timeout=5.0) as client:
        text = client.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        metric, _, label_text = series.partition("{")
        if metric != name:
            continue
        found = dict(part.split("=", 1) for part in label_text.rstrip("}").split(",") if "=" in part)
        if all(found.get(k, "").strip('"') == v for k, v in (labels or {}).items()):
            total += float(value)
    return total
