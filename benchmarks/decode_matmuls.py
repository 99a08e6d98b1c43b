"""A decode step's quantized matmuls with the weights streaming from memory,
for tuning the kernels: builds of `inferd.kernels.quant_gemv` with extra
compiler flags are alternated round by round, so a noisy host affects each alike.

    python benchmarks/decode_matmuls.py [--rows 8] [--rounds 12] [--variant=-DNAME=VALUE ...]

One round is what `--weights mixed` reads in a step of the bundled Gemma 3
270M: 18 layers of int8 projections (fused QKV, output, fused gate-up, down;
100 MB, more than the caches hold) and the int4 262k-row head. Prints the
fastest and median round for each build ("default" is the source as is).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferd.arch.quantized_linear import quantize_int8
from inferd.kernels import quant_gemv

LAYERS = 18
LAYER_SHAPES = [(1536, 640), (640, 1024), (4096, 640), (640, 2048)]
HEAD = (262144, 640)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="activation rows (sequences in the step)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], help="extra compiler flags for another build")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    builds = [()] + [tuple(v.split()) for v in args.variant]
    libraries = [quant_gemv.library(flags) for flags in builds]

    layers = []
    for _ in range(LAYERS):
        for n, k in LAYER_SHAPES:
            q, scales = quantize_int8(torch.randn(n, k), torch.bfloat16)
            layers.append((quant_gemv.tile_int8(q), scales, torch.randn(args.rows, k).to(torch.bfloat16)))
    n, k = HEAD
    head = quant_gemv.tile_int4(torch.randint(0, 16, (n, k)), (torch.rand(n, k // 32) * 0.01).to(torch.bfloat16),
                                (-torch.rand(n, k // 32) * 0.1).to(torch.bfloat16))
    head_x = torch.randn(args.rows, k).to(torch.bfloat16)

    times = {i: {"layers": [], "head": []} for i in range(len(builds))}
    for round_ in range(args.rounds + 2):  # two warm-up rounds
        for i, lib in enumerate(libraries):
            start = time.perf_counter()
            for weight, scales, x in layers:
                quant_gemv.int8_matmul(x, weight, scales, None, lib)
            middle = time.perf_counter()
            quant_gemv.int4_matmul(head_x, *head, None, lib, out_dtype=torch.float32)
            end = time.perf_counter()
            if round_ >= 2:
                times[i]["layers"].append(middle - start)
                times[i]["head"].append(end - middle)
    print(f"{'build':<36}{'layers ms (fastest, median)':>30}{'head ms (fastest, median)':>28}")
    for i, flags in enumerate(builds):
        layer_t, head_t = times[i]["layers"], times[i]["head"]
        print(f"{' '.join(flags) or 'default':<36}{min(layer_t) * 1e3:>18.2f}{statistics.median(layer_t) * 1e3:>10.2f}"
              f"{min(head_t) * 1e3:>18.2f}{statistics.median(head_t) * 1e3:>10.2f}")


if __name__ == "__main__":
    main()
