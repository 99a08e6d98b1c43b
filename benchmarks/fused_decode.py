"""Decode steps with the layers as one native call against the modules' path:
the engine alone, no HTTP, the bundled model, greedy, speculation off.

    python benchmarks/fused_decode.py [--streams 1 4 8] [--steps 150] [--rounds 3]

Rounds alternate the two paths in one process, so a loaded host slows both
alike; prints the median step of each round and the median over rounds.
Run it with INFERD_ISA=avx2 (and ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) to measure the AVX2
build, where `--dtype auto` is float32.
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
from inferd.kernels import isa
from inferd.models.loader import load_model


def median_step(loaded, streams: int, steps: int, fused: bool) -> float:
    loaded.model.fuse_decode = fused
    engine = Engine(loaded, EngineConfig(parallel=streams, ctx_size=1024, speculative="off"))
    prompt = loaded.tokenizer.encode("Write a short story about a lighthouse keeper.")
    params = SamplingParams(max_tokens=steps + 16, temperature=0.0, ignore_eos=True)
    for i in range(streams):
        engine.add_request(EngineRequest(f"r{i}", prompt, params))
    for _ in range(6):  # the prefill, then a few decode steps
        engine.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model()
    print(f"kernels built for {isa.selected()}, {loaded.dtype}; median step (ms) per round")
    print(f"{'streams':>7}  {'modules':>24}  {'one call':>24}  ratio")
    for streams in args.streams:
        rounds: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for fused in (r % 2 == 0, r % 2 != 0):  # alternate which goes first
                rounds[fused].append(median_step(loaded, streams, args.steps, fused))
        plain, fused = (statistics.median(rounds[f]) for f in (False, True))
        shown = {f: " ".join(f"{t:.2f}" for t in rounds[f]) for f in rounds}
        print(f"{streams:>7}  {shown[False]:>24}  {shown[True]:>24}  {fused / plain:.2f}")


if __name__ == "__main__":
    main()
