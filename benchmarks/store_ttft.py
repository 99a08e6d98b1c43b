"""Time to first token of a model served from the model store, with its files
cold and warm in the OS page cache.

    python benchmarks/store_ttft.py [--runs 3] [--threads 2] [--drop-caches]

The bundled Gemma 3 270M GGUF is imported with --copy into a fresh data dir,
so the server reads a blob (`models/blobs/sha256-...`) through the store's
view, not the package's file. Each run starts `inferd serve --model
gemma-copy` and times: process start to /health 200 ("ready"), then a
streamed /v1/completions of one token (TTFT), and start to that first token.
Servers get a private XDG_CACHE_HOME, so the weight and tokenizer caches
they build are theirs alone.

    first load   no weight cache yet (a new cache folder each run): the GGUF
                 is read, dequantized, and the cache written
    cold         the blob and the caches evicted from the page cache
                 (posix_fadvise DONTNEED on each file; `fincore` confirms),
                 Python and torch stay warm
    warm         the same again, nothing evicted
    all cold     (--drop-caches) `echo 3 > /proc/sys/vm/drop_caches` first:
                 every file cold, Python and torch's libraries included

`--in-process` measures the same load in this process instead (no process
start, no HTTP): `load_model` of the stored name, then one engine step to the
first token, cold and warm alternating. On a busy shared machine a server's
start-up varies by seconds between runs; this isolates what the file cache
changes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

PROMPT = "The capital of France is"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(data: Path, cache: Path, threads: int) -> tuple[float, float, float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")} | {"XDG_CACHE_HOME": str(cache)}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "inferd.cli", "serve", "--model", "gemma-copy", "--data-dir",
                             str(data), "--port", str(port), "--threads", str(threads), "--parallel", "1",
                             "--ctx-size", "512"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            while True:
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit("the server exited before it was ready")
                time.sleep(0.02)
            ready = time.monotonic()
            body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "stream": True}
            with http.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and '"text"' in line:
                        break
            first = time.monotonic()
    finally:
        proc.terminate()
        proc.wait(30)
    return ready - started, (first - ready) * 1000, first - started


def evict(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def resident_kb(paths: list[Path]) -> int:
    """Page-cache residency of `paths`, from util-linux's fincore (0 when it is missing)."""
    if not shutil.which("fincore") or not paths:
        return 0
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, paths)], capture_output=True, text=True).stdout
    return sum(int(v) for v in out.split()) // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--drop-caches", action="store_true", help="also runs with every file cold (needs root)")
    parser.add_argument("--in-process", action="store_true", help="load in this process: no server, no HTTP")
    args = parser.parse_args()

    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model
    from inferd.models.default import default_model_path

    work = Path(tempfile.mkdtemp(prefix="inferd-store-ttft-"))
    store = ModelStore(work / "data" / "models")
    manifest = import_model(store, default_model_path(), name="gemma-copy", copy=True)
    blob = store.blobs.path(manifest.files[0].sha256)
    print(f"model: gemma-copy ({manifest.size / 1e6:.0f} MB blob {blob.name[:19]}...), {args.runs} runs each, "
          f"--threads {args.threads}")
    results: dict[str, list[tuple[float, float, float]]] = {}
    resident: dict[str, int] = {}
    cache = work / "cache"
    if args.in_process:
        return in_process(work, blob, cache, args)
    for i in range(args.runs):
        fresh = work / f"first-{i}"
        results.setdefault("first load", []).append(one_run(work / "data", fresh, args.threads))
        if i == 0:
            shutil.copytree(fresh, cache)  # the caches later runs start from
    files = lambda: [blob, *(p for p in cache.rglob("*") if p.is_file())]  # noqa: E731
    for i in range(args.runs):
        evict(files())
        resident["cold"] = resident_kb(files())
        results.setdefault("cold", []).append(one_run(work / "data", cache, args.threads))
        resident["warm"] = resident_kb(files())
        results.setdefault("warm", []).append(one_run(work / "data", cache, args.threads))
    if args.drop_caches:
        for i in range(args.runs):
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            resident["all cold"] = resident_kb(files())
            results.setdefault("all cold", []).append(one_run(work / "data", cache, args.threads))
    print(f"{'scenario':<12} {'resident':>10} {'ready (s)':>10} {'TTFT (ms)':>10} {'start to 1st token (s)':>23}")
    for name, runs in results.items():
        ready, ttft, total = (statistics.median(r[k] for r in runs) for k in range(3))
        res = f"{resident[name] / 1024:.0f} MB" if name in resident else "-"
        print(f"{name:<12} {res:>10} {ready:>10.2f} {ttft:>10.0f} {total:>23.2f}")
    shutil.rmtree(work, ignore_errors=True)


def in_process(work: Path, blob: Path, cache: Path, args) -> None:
    os.environ["XDG_CACHE_HOME"] = str(cache)  # read by the weight and tokenizer caches at each load
    import torch

    from inferd.config import EngineConfig
    from inferd.engine.engine import Engine
    from inferd.engine.engine_request import EngineRequest
    from inferd.engine.sampling_params import SamplingParams
    from inferd.models.loader import load_model

    torch.set_num_threads(args.threads)
    config = EngineConfig(parallel=1, ctx_size=512)

    def load_and_first_token() -> tuple[float, float]:
        started = time.monotonic()
        loaded = load_model("gemma-copy", data_dir=str(work / "data"))
        engine = Engine(loaded, config)
        ready = time.monotonic()
        engine.add_request(EngineRequest("r", loaded.tokenizer.encode(PROMPT), SamplingParams(max_tokens=1, temperature=0)))
        while engine.has_work and not any(out.token_ids for out in engine.step()):
            pass
        return ready - started, (time.monotonic() - ready) * 1000

    load_and_first_token()  # builds the weight cache
    files = [blob, *(p for p in cache.rglob("*") if p.is_file())]
    times: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
    for _ in range(args.runs):
        evict(files)
        cold_resident = resident_kb(files)
        times["cold"].append(load_and_first_token())
        warm_resident = resident_kb(files)
        times["warm"].append(load_and_first_token())
    print(f"in process ({len(files)} files evicted for cold: {cold_resident // 1024} MB resident before a cold load, "
          f"{warm_resident // 1024} MB before a warm one)")
    print(f"{'scenario':<8} {'load_model + engine (s)':>24} {'first token (ms)':>17}")
    for name, runs in times.items():
        print(f"{name:<8} {statistics.median(r[0] for r in runs):>24.3f} {statistics.median(r[1] for r in runs):>17.0f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
