"""Ops and wall time of one decode step: the engine alone, no HTTP.

    python benchmarks/step_time.py [--weights bf16] [--streams 1] [--steps 60]

Prints the top-level aten ops per step (torch.profiler, deterministic) and
the fastest and median step time; on a shared machine the fastest step is
the steadier figure.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", default="bf16")
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(weights=args.weights)
    engine = Engine(loaded, EngineConfig(parallel=args.streams, ctx_size=1024))
    prompt = loaded.tokenizer.encode("Write a short story about a lighthouse keeper.")
    params = SamplingParams(max_tokens=args.steps + 32, temperature=0.0, ignore_eos=True)
    for i in range(args.streams):
        engine.add_request(EngineRequest(f"r{i}", prompt, params))
    for _ in range(6):  # prefill, then a few warm-up decode steps
        engine.step()
    profiled = 8
    with torch.profiler.profile() as prof:
        for _ in range(profiled):
            engine.step()
    ops = sum(1 for e in prof.events() if e.cpu_parent is None) // profiled
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    print(f"{args.weights}, {args.streams} stream(s): {ops} top-level ops per step; "
          f"step ms fastest {min(times) * 1e3:.1f}, median {statistics.median(times) * 1e3:.1f}")


if __name__ == "__main__":
    main()
