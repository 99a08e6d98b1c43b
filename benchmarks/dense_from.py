"""Where the dense weights overtake the GGUF's tiles: whole decode steps of
the bundled model at several stream counts, for pairs of row thresholds.

    python benchmarks/dense_from.py [--pairs 2,6 5,17 9,17] [--streams 1 2 4 8 16] [--rounds 2]

A pair is (rows from which a projection uses its dense weight, rows from which
the LM head does): `arch/file_blocks.py`'s LAYER_DENSE_FROM and HEAD_DENSE_FROM.
The engine alone, no HTTP, speculation off; each pair's median step over 20
steps, the pairs alternating every round; prints the fastest round.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferd.arch.gguf_linear import GGUFLinear
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def set_thresholds(model: torch.nn.Module, layers: int, head: int) -> None:
    for module in model.modules():
        if isinstance(module, GGUFLinear) and module.dense_from_rows is not None:
            module.dense_from_rows = head if module is model.fast_head else layers


def median_step(loaded, streams: int) -> float:
    """The median of 20 decode steps of `streams` greedy requests (the engine alone, speculation off)."""
    engine = Engine(loaded, EngineConfig(parallel=streams, ctx_size=512, speculative="off"))
    for i in range(streams):
        prompt = [2, *range(100 + 7 * i, 140 + 7 * i)]  # token ids: a synthetic model's vocabulary has no words
        engine.add_request(EngineRequest(f"r{i}", prompt, SamplingParams(max_tokens=60, temperature=0.0,
                                                                         ignore_eos=True)))
    for _ in range(4):  # the prefill, then warm decode steps
        engine.step()
    times = []
    for _ in range(20):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", nargs="+", default=["2,6", "5,6", "2,17", "5,17", "9,17"])
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(2)
    pairs = [tuple(int(v) for v in pair.split(",")) for pair in args.pairs]
    loaded = load_model()
    if loaded.model.fast_head is None or not isinstance(loaded.model.fast_head, GGUFLinear) \
            or loaded.model.fast_head.dense_from_rows is None:
        raise SystemExit("the head has no dense copy here (an engine in float32): nothing to compare")
    best = {(pair, s): float("inf") for pair in pairs for s in args.streams}
    for r in range(args.rounds):
        for streams in args.streams:
            for pair in pairs if r % 2 == 0 else pairs[::-1]:
                set_thresholds(loaded.model, *pair)
                best[(pair, streams)] = min(best[(pair, streams)], median_step(loaded, streams))
    print("median decode step (ms); columns: (layers dense from, head dense from)")
    print(f"{'streams':<9}" + "".join(f"{str(pair):>12}" for pair in pairs))
    for streams in args.streams:
        print(f"{streams:<9}" + "".join(f"{best[(pair, streams)] * 1e3:>12.1f}" for pair in pairs))


if __name__ == "__main__":
    main()
