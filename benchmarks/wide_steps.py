"""Decode steps wider than one pass of the GGUF kernels (8 rows): the limits
this CPU ships with against others.

    python benchmarks/wide_steps.py [--model PATH] [--streams 8 12 16 24 32] [--threads 2] [--rounds 3]
                                    [--settings any,33 any,17 24,25]

Where the model keeps dense bf16 copies and the CPU has AMX, a step of more
than 24 decode rows leaves the one native call for the modules (which read
the dense copies), and the head reads its dense copy from 17 rows; on the
portable build, past 8 (`arch/fused_decode.py` rows_limit,
`arch/file_blocks.py` head_dense_from). A setting names the most rows the
one call takes (or any) and the rows from which the head reads its dense
copy: the default, any,33, is what CPUs without AMX ship with. One model,
the engine alone, greedy, speculation off; the settings alternate every
round, each a median of 20 steps; prints the fastest round, and shipped's
time over each setting's. `--model` takes any GGUF, such as one from
`synthetic_gguf.py` where the bundled model is not installed.
"""

from __future__ import annotations

import argparse

import torch
from dense_from import median_step

from inferd.arch.gguf_linear import GGUFLinear
from inferd.kernels import isa
from inferd.models.loader import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a GGUF (default: the bundled model)")
    parser.add_argument("--streams", nargs="+", type=int, default=[8, 12, 16, 24, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=["any,33"], help="ROWS,HEAD pairs beside the shipped one")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device="cpu")
    model, head = loaded.model, loaded.model.fast_head
    median_step(loaded, 1)  # builds the one call's plan
    fused = model._fused
    if fused is None:
        raise SystemExit("this model's decode layers do not run as one call here: nothing to compare")
    shipped = (fused.max_rows, head.dense_from_rows if isinstance(head, GGUFLinear) else None)
    settings = {"shipped": shipped}
    for text in args.settings:
        rows, head_from = text.split(",")
        settings[text] = (None if rows == "any" else int(rows), None if shipped[1] is None else int(head_from))
    print(f"ISA {isa.selected()}, AMX {isa.amx_bf16()}, {loaded.dtype}, {args.threads} threads; "
          f"shipped: the one call up to {shipped[0] or 'any'} rows, the head's dense copy from {shipped[1]}")
    best = {(name, s): float("inf") for name in settings for s in args.streams}
    for r in range(args.rounds):
        for streams in args.streams:
            for name in settings if r % 2 == 0 else list(settings)[::-1]:
                fused.max_rows, head_from = settings[name]
                if head_from is not None:
                    head.dense_from_rows = head_from
                best[(name, streams)] = min(best[(name, streams)], median_step(loaded, streams))
    print("median step ms (shipped's over the setting's)")
    print(f"{'streams':<9}" + "".join(f"{name:>18}" for name in settings))
    for s in args.streams:
        base = best[("shipped", s)]
        cells = (f"{best[(name, s)] * 1e3:.1f} ({base / best[(name, s)]:.2f})" for name in settings)
        print(f"{s:<9}" + "".join(f"{cell:>18}" for cell in cells))


if __name__ == "__main__":
    main()
