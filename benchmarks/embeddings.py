"""inferd's embeddings against sentence-transformers, side by side, on the
bundled all-MiniLM-L6-v2.

    python benchmarks/embeddings.py [--threads 2] [--rounds 3] [--dtype auto|float32|bfloat16] [--http]

Rows: sentences per second for 1,000 short sentences, of wall time and of
this process's CPU time (inferd: one request of all 1,000 through its
serving core, tokenization included; sentence-transformers: `encode` with
its default batch of 32, and with 128), and the p50 latency of embedding one
sentence. Both run in this process with the same
torch threads, alternating which goes first each round; the table shows the
median of the rounds. `--http` adds the same rows against a real `inferd
serve --model all-minilm-l6-v2` process (its own threads, over HTTP).
Only ratios are comparable across runs on a shared machine. For what a CPU
without AVX-512 gets, hold both sides' vector units to AVX2:
`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 INFERD_ISA=avx2`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import time

import httpx
import numpy as np
import torch

from inferd.config import ServeConfig
from inferd.kernels import isa
from inferd.models.default_embedding import default_embedding_path
from inferd.server.assemble import new_state
from inferd.server.pooled_models import load_encoder_model
from inferd.serving.embeddings import embed

SUBJECTS = "the cat|a dog|my neighbour|the server|this model|our team|a small bird|the old library|every engineer|the river".split("|")
VERBS = "reads|builds|watches|embeds|answers|crosses|finds|paints|measures|sends".split("|")
OBJECTS = ("a long letter|the morning news|three vectors|a red bicycle|the quiet garden|some fresh bread|"
           "the final report|a paper boat|the city lights|an open question").split("|")
ENDINGS = ("", " today", " before dinner", " with great care", " in the rain", " for the second time this week")


def sentences(n: int = 1000, seed: int = 0) -> list[str]:
    """Short sentences (6 to 14 words), deterministic."""
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}."
            for _ in range(n)]


def p50_ms(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def rate(fn, count: int) -> tuple[float, float]:
    """Items per second of wall time, and per second of this process's CPU
    time (steadier on a shared machine: time spent descheduled is not counted)."""
    fn()  # warm: the first batches of a shape build their kernels
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return count / (time.perf_counter() - start), count / (time.process_time() - cpu)


class InProcess:
    def __init__(self, dtype: str):
        self.loop = asyncio.new_event_loop()
        self.state = new_state(ServeConfig(embedding_dtype=dtype), "minilm")
        load_encoder_model(self.state, "all-minilm-l6-v2")
        self.state.served.loaded = True

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack(self.loop.run_until_complete(embed(self.state, None, texts)).vectors)


class OverHttp:
    def __init__(self, threads: int, dtype: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inferd.cli", "serve", "--model", "all-minilm-l6-v2", "--port", str(self.port),
             "--threads", str(threads), "--embedding-dtype", dtype, "--no-metrics"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=300)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self.client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit("inferd serve did not become ready")

    def encode(self, texts: list[str]) -> np.ndarray:
        r = self.client.post("/v1/embeddings", json={"input": texts, "encoding_format": "base64"})
        r.raise_for_status()
        import base64

        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in r.json()["data"]])

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        self.process.wait(30)


# What holds each side's vector units below the CPU's best (see the module doc).
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "INFERD_ISA")


def held_to(environ=os.environ) -> str:
    """The instruction-set limits this run is under, as set in the environment,
    or "none" (the CPU's flags alone do not say which kernels ran)."""
    limits = [f"{name}={environ[name]}" for name in ISA_LIMITS if environ.get(name, "").strip()]
    return " ".join(limits) if limits else "none"


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="auto", help="inferd's --embedding-dtype")
    parser.add_argument("--latency-repeats", type=int, default=50)
    parser.add_argument("--http", action="store_true", help="also measure a real inferd serve over HTTP")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    load_before = load_average()
    texts = sentences()
    one = texts[:1]
    peer = SentenceTransformer(str(default_embedding_path()), device="cpu")
    ours = InProcess(args.dtype)
    served = OverHttp(args.threads, args.dtype) if args.http else None
    cosine = (ours.encode(texts[:100]) * peer.encode(texts[:100])).sum(1).min()
    rows: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        runs = [
            ("inferd sentences/s", lambda: rate(lambda: ours.encode(texts), len(texts))),
            ("inferd single-sentence p50 ms", lambda: p50_ms(lambda: ours.encode(one), args.latency_repeats)),
            ("st sentences/s (batch 32)", lambda: rate(lambda: peer.encode(texts), len(texts))),
            ("st sentences/s (batch 128)", lambda: rate(lambda: peer.encode(texts, batch_size=128), len(texts))),
            ("st single-sentence p50 ms", lambda: p50_ms(lambda: peer.encode(one), args.latency_repeats)),
        ]
        if served is not None:
            runs += [("inferd http sentences/s", lambda: rate(lambda: served.encode(texts), len(texts))[0]),
                     ("inferd http single-sentence p50 ms", lambda: p50_ms(lambda: served.encode(one),
                                                                            args.latency_repeats))]
        if round_ % 2:
            runs.reverse()
        for name, run in runs:
            result = run()
            if isinstance(result, tuple):  # a rate: wall, then CPU
                rows.setdefault(name, []).append(result[0])
                result = result[1]
                name = name.replace("/s", "/cpu-s")
            rows.setdefault(name, []).append(result)
    if served is not None:
        served.close()
    median = {name: statistics.median(values) for name, values in rows.items()}
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in _cpu_flags()]
    print(f"CPU: {' '.join(flags)}; inferd kernels: {isa.selected()}; torch threads {args.threads}; "
          f"inferd dtype {args.dtype}; min cosine to sentence-transformers {cosine:.6f}")
    print(f"ISA limits: {held_to()}; load average {load_before} before, {load_average()} after")
    print(f"{'row':40} {'median':>10}   rounds")
    for name, value in median.items():
        print(f"{name:40} {value:10.1f}   {' '.join(f'{v:.1f}' for v in rows[name])}")
    throughput = median["inferd sentences/s"] / median["st sentences/s (batch 32)"]
    by_cpu = median["inferd sentences/cpu-s"] / median["st sentences/cpu-s (batch 32)"]
    latency = median["inferd single-sentence p50 ms"] / median["st single-sentence p50 ms"]
    print(f"throughput ratio {throughput:.2f} by wall time, {by_cpu:.2f} by CPU time "
          f"(target >= 1.5 by CPU time: {'meets' if by_cpu >= 1.5 else 'misses'}); "
          f"single-sentence latency ratio {latency:.2f} (target <= 1.0: {'meets' if latency <= 1.0 else 'misses'})")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(line for line in f if line.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return set()


if __name__ == "__main__":
    main()
