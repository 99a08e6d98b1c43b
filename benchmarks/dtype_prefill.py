"""One dtype's prefill and decode: the engine alone, the bundled model, one
thread, a 512-token prompt then 32 greedy tokens (the second of two
requests, each with its own prompt, so the prefix cache does not help).

    python benchmarks/dtype_prefill.py auto|bfloat16|float32

With `INFERD_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` an
AVX-512 machine runs the code an AVX2 one would (`--dtype auto` is float32
there).
"""

from __future__ import annotations

import sys
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def main() -> None:
    torch.set_num_threads(1)
    loaded = load_model(None, dtype=sys.argv[1] if len(sys.argv) > 1 else "auto")
    engine = Engine(loaded, EngineConfig(parallel=1, ctx_size=2048))
    for round_ in range(2):  # the first warms up
        text = f"Part {round_ + 7}. " + "The history of the lighthouse and its keepers. " * 52
        prompt = loaded.tokenizer.encode(text)[:512]
        engine.add_request(EngineRequest(f"r{round_}", prompt, SamplingParams(max_tokens=32, temperature=0.0)))
        started, tokens = time.perf_counter(), []
        while not tokens:
            for out in engine.step():
                tokens += out.token_ids
        first = time.perf_counter()
        while engine.has_work:
            for out in engine.step():
                tokens += out.token_ids
        done = time.perf_counter()
    print(f"{str(loaded.dtype).removeprefix('torch.'):>9}: prefill 512 tokens {1000 * (first - started):.0f} ms, "
          f"decode {(len(tokens) - 1) / (done - first):.1f} tok/s")


if __name__ == "__main__":
    main()
