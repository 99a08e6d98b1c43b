"""Decode steps with this tree's GGUF kernels against another tree's, in one process.

    python benchmarks/kernel_baseline.py --baseline /path/to/other/tree [--streams 1 8] [--rounds 10]
        [--model PATH | --k-model] [--kernel gguf_gemv | decode_attention] [--prompt-tokens N]

The engine (one call per step, greedy, speculation off) runs on this tree's
code; only the library of GGUF products (`gguf_gemv.c` and its headers), or
with `--kernel decode_attention` that of decode attention, is switched
between this tree's and the baseline's (a `git worktree` of an older commit)
every round, alternating which goes first, so a loaded host slows both
alike. `--prompt-tokens` sets each stream's context (attention reads it all
every step). The weights are tiled once, by this tree: both libraries must
read the same tile layout. Prints each side's median step and in how many
rounds this tree's was the faster.

The bundled model's widths (640) keep most of its projections in Q5_0, so
its steps barely show the K formats' kernels. `--k-model` writes a
llama-shaped GGUF of random blocks whose projections are Q4_K and Q6_K, as a
Q4_K_M file of a 1B-class model has them (hidden 2048, 8 layers, ~0.5B
parameters), and times that instead.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.kernels import decode_attention, decode_layers, gguf_gemv
from inferd.kernels.native import load_library
from inferd.native_build import declare
from inferd.models.loader import load_model

HERE = Path(__file__).resolve().parent.parent


def tree_library(tree: Path, module, flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Another tree's build of a kernel module's C source (`module`: gguf_gemv or
    decode_attention), for the selected instruction set (or with `flags`), each function it
    has declared as this tree declares it."""
    lib = load_library(tree / "inferd" / "kernels" / f"{module.__name__.rsplit('.', 1)[-1]}.c", list(flags))
    return declare(lib, {name: signature for name, signature in module.SIGNATURES.items() if hasattr(lib, name)})


def gemv_library(tree: Path, flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Another tree's GGUF products."""
    return tree_library(tree, gguf_gemv, flags)


def alternating_steps(engine: Engine, sides: list[str], switch, rounds: int, per_round: int) -> dict[str, list[float]]:
    """Each side's median step (ms) per round: `switch(side)` and then `per_round` steps of
    `engine`, the sides' order alternating from round to round, so a loaded host slows both alike."""
    medians: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in sides[:: 1 if r % 2 == 0 else -1]:
            switch(name)
            taken = []
            for _ in range(per_round):
                began = time.perf_counter()
                engine.step()
                taken.append(time.perf_counter() - began)
            medians[name].append(statistics.median(taken) * 1e3)
    return medians


def write_k_model(path: Path) -> None:
    """Random K-format blocks (small fp16 scales) in a llama-shaped GGUF, written as the converter writes one."""
    sys.path.insert(0, str(HERE / "tests"))
    import gguf_models
    from gguf import GGMLQuantizationType as Q

    blocks = {Q.Q4_K: (256, 144, (0, 2)), Q.Q6_K: (256, 210, (208,))}  # weights, bytes, fp16 scale offsets
    rng = np.random.default_rng(0)
    plain = gguf_models._add_tensor

    def add_tensor(writer, name, array, qtype):
        if qtype not in blocks:
            return plain(writer, name, array, qtype)
        size, nbytes, scales = blocks[qtype]
        rows, width = array.shape
        raw = rng.integers(0, 256, (rows, width // size, nbytes), dtype=np.uint8)
        for at in scales:
            raw[:, :, at:at + 2] = np.full((rows, width // size), 0.002, np.float16)[..., None].view(np.uint8)
        writer.add_tensor(name, raw.reshape(rows, -1), raw_dtype=qtype)

    hidden, ffn, layers, vocab, heads, kv_heads = 2048, 5632, 8, 32000, 16, 4
    config = dict(num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                  hidden_size=hidden, num_hidden_layers=layers, intermediate_size=ffn, rms_norm_eps=1e-5,
                  rope_theta=10000.0, vocab_size=vocab, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    state, qtypes = {}, {}
    for name, shape, qtype in [("model.embed_tokens.weight", (vocab, hidden), Q.Q6_K),
                               ("lm_head.weight", (vocab, hidden), Q.Q6_K)]:
        state[name], qtypes[name] = torch.zeros(shape), qtype
    for i in range(layers):
        at = f"model.layers.{i}."
        for name, rows, width, qtype in [("self_attn.q_proj", hidden, hidden, Q.Q4_K),
                                         ("self_attn.k_proj", hidden // heads * kv_heads, hidden, Q.Q4_K),
                                         ("self_attn.v_proj", hidden // heads * kv_heads, hidden, Q.Q4_K),
                                         ("self_attn.o_proj", hidden, hidden, Q.Q4_K),
                                         ("mlp.gate_proj", ffn, hidden, Q.Q4_K), ("mlp.up_proj", ffn, hidden, Q.Q4_K),
                                         ("mlp.down_proj", hidden, ffn, Q.Q6_K)]:
            state[at + name + ".weight"], qtypes[at + name + ".weight"] = torch.zeros(rows, width), qtype
        state[at + "input_layernorm.weight"] = torch.full((hidden,), 0.5)
        state[at + "post_attention_layernorm.weight"] = torch.full((hidden,), 0.5)
    state["model.norm.weight"] = torch.ones(hidden)
    gguf_models._add_tensor = add_tensor
    try:
        gguf_models.write_gguf(path, "llama", config, state, qtypes)
    finally:
        gguf_models._add_tensor = plain


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, type=Path, help="another checkout of inferd")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40, help="steps per round and side")
    parser.add_argument("--threads", type=int, default=2)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help="a GGUF file or model name (default: the bundled model)")
    which.add_argument("--k-model", action="store_true", help="a llama-shaped GGUF of random K-format blocks")
    parser.add_argument("--kernel", choices=["gguf_gemv", "decode_attention"], default="gguf_gemv")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="each stream's prompt length")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    own = decode_layers.kernels()
    if args.kernel == "gguf_gemv":
        libraries = {"this tree": gguf_gemv.library(), "baseline": gemv_library(args.baseline.resolve())}
        field, symbol = "gemv", "inferd_gguf_gemv"
    else:
        libraries = {"this tree": decode_attention.library(), "baseline": tree_library(args.baseline.resolve(), decode_attention)}
        field, symbol = "decode_attention", "inferd_decode_attention"
    kernels = {}
    for name, library in libraries.items():
        kernels[name] = decode_layers.Kernels.from_buffer_copy(own)
        setattr(kernels[name], field, ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value)
    side = ["this tree"]
    decode_layers.kernels = lambda: kernels[side[0]]  # the layers' kernels, one native call a step
    if args.kernel == "gguf_gemv":
        gguf_gemv.library = lambda extra_flags=(): libraries[side[0]]  # the head's, through gguf_gemv.argmax
        gguf_gemv.screen_rows = lambda lib=None: 0  # the head whole on both sides: its screen is built once

    with tempfile.TemporaryDirectory() as folder:
        model = args.model
        if args.k_model:
            model = str(Path(folder) / "k-formats.gguf")
            write_k_model(Path(model))
        loaded = load_model(model)
        loaded.model.fuse_decode = True
        prompt = list(range(3, 40)) if args.k_model else loaded.tokenizer.encode("Write a short story about a lighthouse keeper.")
        if args.prompt_tokens:
            prompt = [prompt[i % len(prompt)] for i in range(args.prompt_tokens)]
        print(f"{model or 'the bundled model'}, {args.threads} threads; median step (ms)")
        for streams in args.streams:
            engine = Engine(loaded, EngineConfig(parallel=streams, ctx_size=2048, speculative="off"))
            params = SamplingParams(max_tokens=2 * args.rounds * args.steps + 16, temperature=0.0, ignore_eos=True)
            for i in range(streams):
                engine.add_request(EngineRequest(f"r{i}", prompt, params))
            for _ in range(6):  # the prefill, then a few decode steps
                engine.step()
            steps = alternating_steps(engine, list(libraries), lambda name: side.__setitem__(0, name), args.rounds,
                                      args.steps)
            ours, theirs = (statistics.median(steps[name]) for name in libraries)
            wins = sum(a < b for a, b in zip(steps["this tree"], steps["baseline"]))
            print(f"{streams} streams: this tree {ours:.2f}, baseline {theirs:.2f} ({theirs / ours:.2f}x); "
                  f"this tree faster in {wins} of {args.rounds} rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
