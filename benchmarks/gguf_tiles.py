"""The GGUF kernels in the file's row order against tiles of 8 rows, alone.

    python benchmarks/gguf_tiles.py [--isa avx512 avx2 portable] [--rows 1 4 8] [--baseline TREE] [--dtype bfloat16]

For each block format of the bundled model at its shapes (the Q8_0 head,
Q5_0 and Q4_K and Q6_K projections; and a Q5_K one, as Q5_K_M files have), enough copies of the weights to stream
from memory rather than the caches, the same activations through both
layouts; prints the fastest of 5 passes per layout and the bytes read per
second. 2 threads, as the server's default on this machine.

With `--baseline` (another checkout, e.g. a `git worktree` of an older
commit) it times the tiles instead with the baseline's kernels against this
tree's, alternating, and checks that both give the same bits. `--hot` (with
`--baseline`) reads one copy of each tensor again and again, from the
caches: the kernels' arithmetic alone, steadier on a host whose memory
bandwidth moves, and 16 rounds instead of 3. Each side tiles
the same file rows with its own library, so a change of tile layout is
measured as well as a change of kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import numpy as np
import torch

from inferd.kernels import gguf_gemv, isa
from kernel_baseline import gemv_library

SHAPES = [("Q8_0", 262144, 640, "token_embd (the head)"), ("Q5_0", 2048, 640, "ffn_gate"),
          ("Q5_0", 1024, 640, "attn_q"), ("Q4_K", 640, 1024, "attn_output"), ("Q6_K", 640, 2048, "ffn_down"),
          ("Q5_K", 640, 2048, "ffn_down in Q5_K")]  # as a Q5_K_M file has it


def random_rows(block_format: str, n: int, k: int, rng: np.random.Generator) -> torch.Tensor:
    """Any bytes are valid blocks but for the fp16 scales: set those to a small value."""
    _, size, nbytes = gguf_gemv.BLOCKS[block_format]
    blocks = rng.integers(0, 256, (n, k // size, nbytes), dtype=np.uint8)
    offsets = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}.get(block_format, (0,))
    for offset in offsets:
        blocks[:, :, offset:offset + 2] = np.full((n, k // size), 0.01, np.float16)[..., None].view(np.uint8)
    return torch.from_numpy(blocks.reshape(n, -1))


def fastest(x: torch.Tensor, parts: list[gguf_gemv.Parts], lib) -> float:
    """Activations and outputs in x's dtype, as a decode step in that dtype has them."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for p in parts:
            gguf_gemv.matmul(x, p, out_dtype=x.dtype, lib=lib)
        times.append((time.perf_counter() - start) / len(parts))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--isa", nargs="+", default=list(isa.runnable()[:2]))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout: its tile kernels against these")
    parser.add_argument("--hot", action="store_true", help="with --baseline: one copy of each tensor, from the caches")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="activations and outputs (bfloat16: an engine computing in bf16, as on AVX-512 BF16)")
    args = parser.parse_args()
    args.dtype = getattr(torch, args.dtype)
    if args.baseline:
        return against_baseline(args)
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    print(f"{'build':<9}{'tensor':<24}{'format':<7}{'rows':>5}{'rows order':>14}{'tiles':>14}{'speed-up':>10}")
    for name in args.isa:
        lib = gguf_gemv.library(tuple(isa.march_flags(name)))
        for block_format, n, k, label in SHAPES:
            copies = max(1, 300_000_000 // (n * gguf_gemv.row_bytes(block_format, k)))
            raws = [random_rows(block_format, n, k, rng) for _ in range(copies)]
            plain = [gguf_gemv.Parts([(block_format, raw)], k) for raw in raws]
            tiled = [gguf_gemv.Parts([(block_format, gguf_gemv.to_tiles(block_format, raw, lib=lib))], k, [True])
                     for raw in raws]
            megabytes = raws[0].numel() / 1e6
            for rows in args.rows:
                x = torch.randn(rows, k).to(args.dtype)
                a, b = fastest(x, plain, lib), fastest(x, tiled, lib)
                print(f"{name:<9}{label:<24}{block_format:<7}{rows:>5}{a * 1e6:>8.0f} us{megabytes / a / 1e3:>4.0f}"
                      f"{b * 1e6:>8.0f} us{megabytes / b / 1e3:>4.0f}{a / b:>9.2f}x")
    print("(us per product; the figure after each is GB/s of weights read)")


def tiled_parts(lib, block_format: str, raw: torch.Tensor, k: int) -> gguf_gemv.Parts:
    """`raw` in `lib`'s own tiles, which may be laid out otherwise than this tree's (Parts checks
    a row's bytes against this tree's layout, so the fields are set here)."""
    type_id = gguf_gemv.BLOCKS[block_format][0]
    lib.inferd_gguf_tiled_row_bytes.argtypes, lib.inferd_gguf_tiled_row_bytes.restype = [ctypes.c_int, ctypes.c_int64], ctypes.c_int64
    lib.inferd_gguf_to_tiles.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    tiles = torch.empty(raw.shape[0], lib.inferd_gguf_tiled_row_bytes(type_id, k), dtype=torch.uint8)
    if lib.inferd_gguf_to_tiles(type_id, raw.data_ptr(), raw.shape[0], k, tiles.data_ptr()) != 0:
        raise ValueError(f"{block_format} [{raw.shape[0]}, {k}] is not held in tiles")
    parts = gguf_gemv.Parts.__new__(gguf_gemv.Parts)
    parts.in_features, parts.out_features, parts.count, parts.raws = k, raw.shape[0], 1, [tiles]
    parts.types = (ctypes.c_int * 1)(type_id | gguf_gemv._TILED)
    parts.pointers = (ctypes.c_void_p * 1)(tiles.data_ptr())
    parts.rows = (ctypes.c_int64 * 1)(raw.shape[0])
    return parts


def against_baseline(args) -> None:
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    print(f"{'build':<9}{'tensor':<24}{'format':<7}{'rows':>5}{'baseline':>12}{'this tree':>12}{'speed-up':>10}  same bits")
    for name in args.isa:
        flags = tuple(isa.march_flags(name))
        libs = {"baseline": gemv_library(args.baseline.resolve(), flags), "this tree": gguf_gemv.library(flags)}
        for block_format, n, k, label in SHAPES:
            if args.hot and n > 16384:  # the head: a slice the caches hold
                n, label = 16384, "token_embd (16k rows)"
            copies = 1 if args.hot else max(1, 300_000_000 // (n * gguf_gemv.row_bytes(block_format, k)))
            raws = [random_rows(block_format, n, k, rng) for _ in range(copies)]
            tiled = {side: [tiled_parts(lib, block_format, raw, k) for raw in raws] * (200 if args.hot else 1)
                     for side, lib in libs.items()}
            for rows in args.rows:
                x = torch.randn(rows, k).to(args.dtype)
                best = {side: float("inf") for side in libs}
                for r in range(16 if args.hot else 3):  # which side goes first alternates
                    for side in list(libs)[:: 1 if r % 2 == 0 else -1]:
                        best[side] = min(best[side], fastest(x, tiled[side], libs[side]))
                same = torch.equal(*(gguf_gemv.matmul(x, tiled[side][0], out_dtype=x.dtype, lib=lib)
                                     for side, lib in libs.items()))
                print(f"{name:<9}{label:<24}{block_format:<7}{rows:>5}{best['baseline'] * 1e6:>9.0f} us"
                      f"{best['this tree'] * 1e6:>9.0f} us{best['baseline'] / best['this tree']:>9.2f}x  {same}")
    rounds = 16 if args.hot else 3
    print(f"(us per product: the fastest of {5 * rounds} passes a side, in {rounds} rounds that alternate which side "
          f"goes first{'; weights from the caches' if args.hot else ''})")


if __name__ == "__main__":
    main()
