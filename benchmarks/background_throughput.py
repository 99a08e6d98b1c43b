"""What low priority costs a batch's throughput in the engine itself (no
HTTP): the same requests run to the end at normal priority (as `inferd
bench`'s are) and at low (as batch items are), in alternating rounds on one
engine. Besides the wall time, which a shared machine's load makes noisy,
it counts engine steps, which no load changes: low-priority prefill is
chunked (a quarter of a step's token budget while only low-priority work
runs), so it can take more steps.

    python benchmarks/background_throughput.py [--parallel 4] [--threads 2] [--requests 16] [--input-len 32]
                                               [--output-len 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest, Priority
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def run(engine: Engine, priority: Priority, args, rng: random.Random, vocab: int, tag: str) -> tuple[int, float]:
    """Steps and seconds until every request (all submitted at once; the engine's slots bound them) ends."""
    params = SamplingParams(max_tokens=args.output_len, temperature=0.0, ignore_eos=True)
    for i in range(args.requests):
        prompt = [rng.randrange(1000, vocab) for _ in range(args.input_len)]
        engine.add_request(EngineRequest(f"{tag}-{i}", prompt, params, priority=priority))
    left, steps, started = args.requests, 0, time.perf_counter()
    while left:
        left -= sum(1 for out in engine.step() if out.finished)
        steps += 1
    return steps, time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(None)
    engine = Engine(loaded, EngineConfig(parallel=args.parallel, ctx_size=1024))
    vocab = loaded.config.vocab_size
    rng = random.Random(7)
    run(engine, Priority.NORMAL, args, rng, vocab, "warm-up")  # the first prompts of each length build kernels
    results: dict[str, list[tuple[int, float]]] = {"normal": [], "low": []}
    for round_ in range(args.rounds):
        for name, priority in (("normal", Priority.NORMAL), ("low", Priority.LOW)):
            results[name].append(run(engine, priority, args, rng, vocab, f"{name}{round_}"))
        (ns, nt), (ls, lt) = results["normal"][-1], results["low"][-1]
        print(f"round {round_ + 1}: normal {ns} steps {nt:.2f} s, low {ls} steps {lt:.2f} s, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    normal_steps = statistics.median(s for s, _ in results["normal"])
    low_steps = statistics.median(s for s, _ in results["low"])
    ratio = statistics.median(n[1] / lo[1] for n, lo in zip(results["normal"], results["low"]))
    print(f"{args.requests} requests of {args.input_len} in / {args.output_len} out, --parallel {args.parallel}: "
          f"normal {normal_steps:.0f} steps, low {low_steps:.0f} steps (low at {normal_steps / low_steps:.0%} of normal's "
          f"rate by steps); wall time, low's rate against normal's per round: median {ratio:.0%}")


if __name__ == "__main__":
    main()
