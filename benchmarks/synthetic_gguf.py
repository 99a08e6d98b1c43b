"""A GGUF laid out as the bundled Gemma 3 270M Q4_K_M is (the same tensor
names, shapes and block formats) but of random blocks and a placeholder
vocabulary: for timing decode steps on a machine the bundled model cannot
reach. Its tokens mean nothing; steps cost what the real model's do.

    python benchmarks/synthetic_gguf.py OUT.gguf
"""

from __future__ import annotations

import argparse
import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf_tiles import random_rows

LAYERS, HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 18, 640, 2048, 4, 1, 256, 262144
# Q4_K_M gives these layers' attn_v and ffn_down more bits: Q8_0 and Q6_K instead of Q5_0 and Q4_K.
MORE_BITS = {0, 1, 4, 7, 10, 13, 15, 16, 17}


def layout() -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, shape as rows x inputs, format) of every tensor, as the bundled file has them."""
    tensors = [("token_embd.weight", (VOCAB, HIDDEN), Q.Q8_0), ("output_norm.weight", (HIDDEN,), Q.F32)]
    for i in range(LAYERS):
        blk = f"blk.{i}."
        tensors += [
            (blk + "attn_q.weight", (HEADS * HEAD_DIM, HIDDEN), Q.Q5_0),
            (blk + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), Q.Q5_0),
            (blk + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), Q.Q8_0 if i in MORE_BITS else Q.Q5_0),
            (blk + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), Q.Q4_K),
            (blk + "ffn_gate.weight", (FFN, HIDDEN), Q.Q5_0),
            (blk + "ffn_up.weight", (FFN, HIDDEN), Q.Q5_0),
            (blk + "ffn_down.weight", (HIDDEN, FFN), Q.Q6_K if i in MORE_BITS else Q.Q4_K),
        ]
        tensors += [(blk + norm, (HEAD_DIM,), Q.F32) for norm in ("attn_q_norm.weight", "attn_k_norm.weight")]
        tensors += [(blk + norm, (HIDDEN,), Q.F32) for norm in ("attn_norm.weight", "post_attention_norm.weight",
                                                                "ffn_norm.weight", "post_ffw_norm.weight")]
    return tensors


def write(path: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_context_length(32768)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(512)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(VOCAB)])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    for name, shape, qtype in layout():
        if qtype == Q.F32:
            w.add_tensor(name, (1 + rng.standard_normal(shape) / 16).astype(np.float32))
        else:
            blocks = random_rows(qtype.name, shape[0], shape[1], rng).numpy()
            w.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    args = parser.parse_args()
    write(args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
