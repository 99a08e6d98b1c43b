"""Batch throughput against `inferd bench` at the same concurrency, and an
interactive request's time to first token with and without a batch running.

    python benchmarks/jobs.py [--parallel 4] [--threads 2] [--requests 48] [--input-len 64] [--output-len 32]
                              [--rounds 2] [--warmup-rounds 1] [--ttft-batch 200] [--ttft-samples 8]
                              [--ttft-rounds 2] [--batch-concurrency N]

One `inferd serve` of the bundled model (fresh data dir) serves both sides:
- throughput: `inferd bench --dataset random --max-concurrency C`
  (streamed /v1/completions, ignore_eos) against a batch of as many
  /v1/completions items of the same lengths (a different seed each run, so
  neither gains from the other's prefix cache), C the batch's concurrency
  (the default --batch-concurrency, PARALLEL), timed from
  POST /v1/batches to status completed; bench and batch alternate, ROUNDS
  times each, after WARMUP_ROUNDS of both that are not counted (a fresh
  server's first prompts of each length build their kernels, which costs
  more than the round itself); the ratio is the median of the rounds' own;
- interactive TTFT: a streamed chat request (16-token prompt, 8 tokens out)
  sent one at a time, idle and while a TTFT_BATCH-item batch runs (every
  batch slot busy; the batch is cancelled afterwards), in TTFT_ROUNDS
  alternating rounds of TTFT_SAMPLES each, so a shared machine's changing
  load falls on both sides alike; medians and p90.
--rounds 0 measures only the TTFT, --ttft-rounds 0 only the throughput;
--batch-concurrency is the server's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from inferd.bench.datasets import random_sessions
from inferd.bench.tokenizer import text_maker_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, data_dir: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    extra = ["--batch-concurrency", str(args.batch_concurrency)] if args.batch_concurrency else []
    proc = subprocess.Popen([sys.executable, "-m", "inferd.cli", "serve", "--port", str(port), "--parallel",
                             str(args.parallel), "--threads", str(args.threads), "--ctx-size", "1024",
                             "--data-dir", data_dir, "--metrics", *extra], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not become ready")


def batch_concurrency(args) -> int:
    """The server's: --batch-concurrency, or its default, --parallel."""
    return args.batch_concurrency or args.parallel


def bench(url: str, args, seed: int) -> float:
    out = subprocess.run([sys.executable, "-m", "inferd.cli", "bench", "--base-url", url, "--dataset", "random",
                          "--num-prompts", str(args.requests), "--input-len", str(args.input_len), "--output-len",
                          str(args.output_len), "--max-concurrency", str(batch_concurrency(args)), "--seed", str(seed),
                          "--json"], capture_output=True, text=True, check=True).stdout
    summary = json.loads(out)
    assert summary["failed"] == 0, summary["errors"]
    return summary["request_throughput"]


def batch_file(http: httpx.Client, args, seed: int, count: int) -> str:
    sessions = random_sessions(text_maker_for(http), seed, count, args.input_len, args.output_len)
    lines = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                "body": {"prompt": s.turns[0], "max_tokens": args.output_len, "ignore_eos": True,
                                         "temperature": 0}}) + "\n" for i, s in enumerate(sessions))
    r = http.post("/v1/files", files={"file": ("in.jsonl", lines.encode())}, data={"purpose": "batch"})
    r.raise_for_status()
    return r.json()["id"]


def create_batch(http: httpx.Client, file_id: str) -> str:
    r = http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/completions",
                                       "completion_window": "24h"})
    r.raise_for_status()
    return r.json()["id"]


def run_batch(http: httpx.Client, args, seed: int) -> float:
    file_id = batch_file(http, args, seed, args.requests)
    started = time.perf_counter()
    batch_id = create_batch(http, file_id)
    while (b := http.get(f"/v1/batches/{batch_id}").json())["status"] not in ("completed", "failed", "cancelled"):
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    assert b["status"] == "completed" and b["request_counts"]["completed"] == args.requests, b
    return args.requests / elapsed


def ttft(http: httpx.Client, prompt: str) -> float:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "stream": True, "temperature": 0}
    started = time.perf_counter()
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    first = time.perf_counter() - started
                    for _ in lines:  # the rest of the answer, so the next sample starts on an idle slot
                        pass
                    return first
    raise RuntimeError("no token came")


def ttfts(http: httpx.Client, args, rng: random.Random) -> list[float]:
    maker = text_maker_for(http)
    return [ttft(http, maker.make(rng, 16)) for _ in range(args.ttft_samples)]


def gauge(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"/metrics has no {name}")


def until(predicate, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the server")
        time.sleep(0.05)


def busy_ttfts(http: httpx.Client, args, rng: random.Random, seed: int) -> tuple[list[float], int]:
    """TTFT samples while a batch fills its slots (items done meanwhile); the batch is cancelled after."""
    batch_id = create_batch(http, batch_file(http, args, seed, args.ttft_batch))
    concurrency = batch_concurrency(args)
    until(lambda: http.get(f"/v1/batches/{batch_id}").json()["request_counts"]["completed"] >= 1
          and gauge(http, "inferd_requests_running") >= concurrency)
    samples = ttfts(http, args, rng)
    done = http.get(f"/v1/batches/{batch_id}").json()["request_counts"]["completed"]
    http.post(f"/v1/batches/{batch_id}/cancel")
    until(lambda: http.get(f"/v1/batches/{batch_id}").json()["status"] == "cancelled"
          and gauge(http, "inferd_requests_running") == 0)
    return samples, done


def describe(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples
    return f"median {statistics.median(samples) * 1000:.0f} ms, p90 {q[-1] * 1000:.0f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds of both run first and not counted")
    p.add_argument("--ttft-batch", type=int, default=200)
    p.add_argument("--ttft-samples", type=int, default=8)
    p.add_argument("--ttft-rounds", type=int, default=2)
    p.add_argument("--batch-concurrency", type=int, default=0, help="the server's; 0 = its default")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as data:
        proc, url = start_server(args, data)
        try:
            with httpx.Client(base_url=url, timeout=600) as http:
                ttft(http, "warm up")
                for round_ in range(args.warmup_rounds if args.rounds else 0):
                    warm = bench(url, args, seed=1000 + 2 * round_), run_batch(http, args, seed=1001 + 2 * round_)
                    print(f"warm-up round {round_ + 1} (not counted): bench {warm[0]:.2f} req/s, "
                          f"batch {warm[1]:.2f} items/s", flush=True)
                bench_rates, batch_rates = [], []
                for round_ in range(args.rounds):
                    bench_rates.append(bench(url, args, seed=2 * round_ + 1))
                    batch_rates.append(run_batch(http, args, seed=2 * round_ + 2))
                    print(f"round {round_ + 1}: bench {bench_rates[-1]:.2f} req/s, batch {batch_rates[-1]:.2f} items/s "
                          f"({batch_rates[-1] / bench_rates[-1]:.0%}), load {os.getloadavg()[0]:.1f}", flush=True)
                rng = random.Random(7)
                idle, busy, done = [], [], 0
                for round_ in range(args.ttft_rounds):
                    idle += ttfts(http, args, rng)
                    samples, items = busy_ttfts(http, args, rng, seed=99 + round_)
                    busy += samples
                    done += items
                    print(f"TTFT round {round_ + 1}: idle {describe(idle[-args.ttft_samples:])}, "
                          f"busy {describe(samples)}, load {os.getloadavg()[0]:.1f}", flush=True)
                preemptions = gauge(http, "inferd_preemptions_total")
        finally:
            proc.terminate()
            proc.wait(60)
    if bench_rates:  # --rounds 0 measures only the interactive TTFT
        bench_rate, batch_rate = statistics.median(bench_rates), statistics.median(batch_rates)
        ratio = statistics.median(b / a for a, b in zip(bench_rates, batch_rates))
        print(f"throughput, {args.requests} requests of {args.input_len} in / {args.output_len} out, concurrency "
              f"{batch_concurrency(args)} (--parallel {args.parallel}): bench {bench_rate:.2f} req/s, "
              f"batch {batch_rate:.2f} items/s (medians); batch/bench per round: median {ratio:.0%}")
    if not idle:  # --ttft-rounds 0 measures only the throughput
        return
    print(f"interactive TTFT idle: {describe(idle)}")
    print(f"interactive TTFT with a {args.ttft_batch}-item batch running ({done} items done while sampling, "
          f"{preemptions:.0f} preemptions): {describe(busy)} ({statistics.median(busy) / statistics.median(idle):.2f}x idle)")


if __name__ == "__main__":
    main()
