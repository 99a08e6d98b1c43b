"""Prompts computed from the GGUF file's blocks against a dense copy: the
engine alone, the bundled model, 2 threads, in one process.

    python benchmarks/prefill_from_blocks.py [--rounds 4]

The model is loaded with dense copies of its projections (as a bf16 model
on AMX keeps them, `arch/file_blocks.py: keeps_dense_copies`), and each
round times a 1,024-token prompt and eight 100-token ones twice: with the
copies, and with every row through the blocks (the projections'
`dense_from_rows` cleared), alternating which goes first. Run it with
`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` to stand for an AVX-512 BF16 CPU
without AMX, or with the AVX2 limits of compare_llama_server.py.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

import inferd.arch.file_blocks as file_blocks
from inferd.arch.gguf_linear import GGUFLinear
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    file_blocks.keeps_dense_copies = lambda dtype: True
    loaded = load_model(None)
    engine = Engine(loaded, EngineConfig(parallel=8, ctx_size=2048, speculative="off"))
    layers = [m for m in loaded.model.modules() if isinstance(m, GGUFLinear) and m.dense_from_rows is not None]
    kept = {id(m): m.dense_from_rows for m in layers}
    counter = iter(range(1 << 30))

    def prefill(length: int, count: int) -> float:
        for _ in range(count):  # prompts of their own: no prefix-cache hits
            n = next(counter)
            rng = random.Random(n)
            prompt = [rng.randrange(1000, 200_000) for _ in range(length)]
            engine.add_request(EngineRequest(f"r{n}", prompt, SamplingParams(max_tokens=1, temperature=0.0)))
        started = time.perf_counter()
        while engine.has_work:
            engine.step()
        return (time.perf_counter() - started) * 1e3

    prefill(1024, 1)  # warm-up
    times: dict[str, list[tuple[float, float]]] = {"dense": [], "blocks": []}
    for r in range(args.rounds):
        for way in ("dense", "blocks") if r % 2 == 0 else ("blocks", "dense"):
            for m in layers:
                m.dense_from_rows = kept[id(m)] if way == "dense" else None
            times[way].append((prefill(1024, 1), prefill(100, 8)))
    print(f"{loaded.dtype}: ms per round, 1,024 tokens | 8 x 100 tokens")
    for way, rounds in times.items():
        print(f"{way:<7}" + "  ".join(f"{a:7.0f} |{b:6.0f}" for a, b in rounds))


if __name__ == "__main__":
    main()
