"""Where a decode step's time goes: the engine alone, no HTTP.

    python benchmarks/profile_decode.py [--streams 1] [--tokens 64] [--profile]

Prints decode tok/s per stream count; --profile adds torch.profiler's top ops.
"""

from __future__ import annotations

import argparse
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", default=None, help="auto, bf16, int8, int4 (default: bf16)")
    parser.add_argument("--parallel", type=int, default=0, help="engine slots; default: --streams")
    parser.add_argument("--ctx-size", type=int, default=1024)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = EngineConfig(model=args.model, parallel=args.parallel or max(args.streams, 1), ctx_size=args.ctx_size)
    loaded = load_model(config.model, config.dtype, config.device, args.weights or "bf16")
    engine = Engine(loaded, config)
    prompt = loaded.tokenizer.encode("Write a short story about a lighthouse keeper who finds a message in a bottle.")
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)

    def run() -> float:
        for i in range(args.streams):
            engine.add_request(EngineRequest(f"r{time.monotonic_ns()}-{i}", prompt, params))
        engine.step()  # prefill
        start, produced = time.perf_counter(), 0
        while engine.has_work:
            produced += len(engine.step())
        return produced / (time.perf_counter() - start)

    run()  # warm-up
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            rate = run()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    else:
        rate = max(run() for _ in range(3))
    print(f"{args.streams} stream(s): {rate:.1f} tok/s decode")


if __name__ == "__main__":
    main()
