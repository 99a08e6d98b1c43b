"""What priority buys an interactive request beside background work, in the
engine itself (no HTTP, no event loop): time to first token of a short
request while low-priority requests keep every sequence slot busy, sent at
normal priority (preempts a background request, its prefill shares a step
with background decodes only) and at low priority (no more urgent than the
background: it waits for a slot and takes its turn), against the same
request on the idle engine. Samples of the three kinds alternate, so a
shared machine's changing load falls on all alike.

    python benchmarks/priority.py [--parallel 4] [--threads 2] [--samples 12] [--input-len 24]
                                  [--background-len 32] [--background-out 16]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest, Priority
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model

_ids = itertools.count()


def tokens(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(1000, vocab) for _ in range(n)]


def first_token_time(engine: Engine, prompt: list[int], priority: Priority, background: int, args,
                     rng: random.Random, vocab: int) -> float:
    """Steps the engine, topping background up to `background` running requests, until the
    probe's first token; the probe arrives once every background slot is busy."""
    bg_params = SamplingParams(max_tokens=args.background_out, temperature=0.0, ignore_eos=True)
    live: set[str] = set()

    def top_up():
        while len(live) < background:
            rid = f"bg{next(_ids)}"
            engine.add_request(EngineRequest(rid, tokens(rng, args.background_len, vocab), bg_params,
                                             priority=Priority.LOW))
            live.add(rid)

    def step() -> list:
        outs = engine.step()
        for out in outs:
            if out.finished:
                live.discard(out.request_id)
        top_up()
        return outs

    top_up()
    # Warm the background into steady state: every slot decoding or prefilling, some items finished.
    for _ in range(rng.randrange(args.background_out, 2 * args.background_out)):
        step()
    probe = f"probe{next(_ids)}"
    started = time.perf_counter()
    engine.add_request(EngineRequest(probe, prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True),
                                     priority=priority))
    while True:
        if any(out.request_id == probe and out.token_ids for out in step()):
            elapsed = time.perf_counter() - started
            break
    for rid in list(live):
        engine.abort(rid)
    return elapsed


def describe(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=10) if len(samples) > 1 else samples
    return f"median {statistics.median(samples) * 1000:.0f} ms, p90 {q[-1] * 1000:.0f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--input-len", type=int, default=24)
    p.add_argument("--background-len", type=int, default=32)
    p.add_argument("--background-out", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(None)
    engine = Engine(loaded, EngineConfig(parallel=args.parallel, ctx_size=1024))
    vocab = loaded.config.vocab_size
    rng = random.Random(7)
    kinds = {"idle": (Priority.NORMAL, 0), "normal beside background": (Priority.NORMAL, args.parallel),
             "low beside background": (Priority.LOW, args.parallel)}
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    first_token_time(engine, tokens(rng, args.input_len, vocab), Priority.NORMAL, 0, args, rng, vocab)  # warm-up
    for i in range(args.samples):
        for kind, (priority, background) in kinds.items():
            prompt = tokens(rng, args.input_len, vocab)
            samples[kind].append(first_token_time(engine, prompt, priority, background, args, rng, vocab))
        print(f"sample {i + 1}: " + ", ".join(f"{k} {v[-1] * 1000:.0f} ms" for k, v in samples.items()), flush=True)
    idle = statistics.median(samples["idle"])
    for kind, values in samples.items():
        print(f"{kind}: {describe(values)} ({statistics.median(values) / idle:.2f}x idle)")
    print(f"preemptions: {engine.stats().preemptions}")


if __name__ == "__main__":
    main()
