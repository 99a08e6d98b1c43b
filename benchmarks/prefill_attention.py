"""A prompt chunk's attention: inferd's decode kernel, row by row, against torch's fused kernel.

    python benchmarks/prefill_attention.py [--rows 100 256 512 1024] [--window 512]

One layer of the bundled model's shape (4 query heads over 1 KV head of 256),
bf16, a cold chunk (rows = keys), 2 threads. The decode kernel reads K and V
from their cache slots and skips the slots a row's causal (or sliding) mask
hides; torch's kernel gets the lengths padded to 32 as `arch/attention.py`
pads them. Prints each one's median ms of 10 and the largest difference of
either from a float32 reference.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from inferd.kernels import decode_attention

HEADS, DIM, BASE = 4, 256, 1000


def median_ms(fn, runs: int = 10) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", nargs="+", type=int, default=[100, 256, 512, 1024])
    parser.add_argument("--window", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    k_cache, v_cache = (torch.randn(BASE + max(args.rows), 1, DIM, dtype=torch.bfloat16) for _ in range(2))
    scale = DIM ** -0.5
    print("rows   window   decode kernel ms   torch fused ms   max diff (kernel / fused)")
    for n in args.rows:
        q = torch.randn(n, HEADS, DIM, dtype=torch.bfloat16)
        slots = (torch.arange(n) + BASE).expand(n, n).contiguous()
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        for window in (None, args.window):
            visible = (j <= i) & (i - j < window) if window else j <= i
            mask = torch.zeros(n, n).masked_fill(~visible, float("-inf"))
            out = torch.empty_like(q)
            kernel = median_ms(lambda: decode_attention.decode_attention(q, k_cache, v_cache, slots, mask, scale, out))
            keys, values = (c[BASE:BASE + n].transpose(0, 1)[None] for c in (k_cache, v_cache))
            pad = -n % 32
            qp, kp, vp = (F.pad(t, (0, 0, 0, pad)) for t in (q.transpose(0, 1)[None], keys, values))
            padded_mask = F.pad(F.pad(visible, (0, pad), value=False), (0, 0, 0, pad), value=True)
            fused_args = {"is_causal": True} if window is None else {"attn_mask": padded_mask}

            def fused():
                return F.scaled_dot_product_attention(qp, kp, vp, enable_gqa=True, scale=scale, **fused_args)

            fused_ms = median_ms(fused)
            reference = F.scaled_dot_product_attention(q.transpose(0, 1)[None].float(), keys.float(), values.float(),
                                                       attn_mask=visible, enable_gqa=True, scale=scale)[0].transpose(0, 1)
            kernel_diff = (out.float() - reference).abs().max().item()
            fused_diff = (fused()[0, :, :n].transpose(0, 1).float() - reference).abs().max().item()
            print(f"{n:<6} {window or '-':<8} {kernel:16.3f} {fused_ms:16.3f}   {kernel_diff:.4f} / {fused_diff:.4f}")


if __name__ == "__main__":
    main()
