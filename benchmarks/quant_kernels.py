"""inferd's quantized matmul kernels against torch's, per matrix of the bundled model.

    python benchmarks/quant_kernels.py [--rows 1 8] [--threads 2]

For each weight shape of Gemma 3 270M (fused QKV, output, fused gate-up,
down, the 262k-row head) and each row count, the fastest of 30 calls of
`inferd.kernels.quant_gemv` and of torch's weight-only kernels
(`_weight_int8pack_mm`, `_weight_int4pack_mm_for_cpu`), with the weight
bytes each reads per second. The small matrices stay in cache between calls,
so their GB/s run above memory bandwidth; the head's do not.
"""

from __future__ import annotations

import argparse
import time

import torch

from inferd.arch.quantized_linear import QuantizedLinear
from inferd.kernels import quant_gemv

SHAPES = {"qkv": (1536, 640), "o": (640, 1024), "gate_up": (4096, 640), "down": (640, 2048), "head": (262144, 640)}


def fastest_ms(fn, calls: int = 30) -> float:
    fn()
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not quant_gemv.available():
        raise SystemExit("inferd's quantized kernels are not built for this CPU (AVX-512 VNNI and a C compiler)")
    print(f"{'matrix':>8} {'bits':>4} {'rows':>4}   {'inferd ms':>9} {'GB/s':>5}   {'torch ms':>8} {'GB/s':>5}")
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k) * 0.05
        for bits in (8, 4):
            ours = QuantizedLinear.from_weight(weight, None, bits, torch.bfloat16, tiled=True)
            theirs = QuantizedLinear.from_weight(weight, None, bits, torch.bfloat16)
            gigabytes = n * k * bits / 8 / 1e9
            for rows in args.rows:
                x = torch.randn(rows, k).to(torch.bfloat16)
                a, b = fastest_ms(lambda: ours(x)), fastest_ms(lambda: theirs(x))
                print(f"{name:>8} {bits:>4} {rows:>4}   {a:>9.3f} {gigabytes / a * 1e3:>5.1f}   "
                      f"{b:>8.3f} {gigabytes / b * 1e3:>5.1f}")


if __name__ == "__main__":
    main()
