"""A greedy pick from the bundled Q8_0 head: the whole head against its screen, per build.

    python benchmarks/head_screen.py [--isa avx512 avx2] [--rows 1 8] [--rounds 3]
    python benchmarks/head_screen.py --steps [--streams 1 2]

The activations are the last hidden states of a real greedy decode (8 prompts
at once), so the screen narrows the head as it does when serving. For each
build and row count: the median ms of `gguf_gemv.argmax` over the whole head
and of `HeadScreen.argmax`, the passes the screen could not narrow, and a
check that both pick the same tokens. 2 threads, as the server's default here.

With `--steps`, whole decode steps instead (the engine alone, greedy, this
CPU's build): the screen used as the build says (`gguf_gemv.screen_rows`)
against never, switched every round of 30 steps in one process, alternating
which goes first; the median step of each and in how many rounds the screen's
was the faster.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.kernels import gguf_gemv, isa
from inferd.models.loader import load_model
from kernel_baseline import alternating_steps

PROMPTS = ["Write a short story about a lighthouse keeper.", "Explain how TCP congestion control works.",
           "def fibonacci(n):", "List the capitals of Europe.", "What is 17 times 23?",
           "Translate to French: the cat sleeps on the mat.", "Summarise the plot of Hamlet in three sentences.",
           "Write a haiku about autumn rain."]


def hidden_states(loaded, tokens: int) -> torch.Tensor:
    """Every hidden state the head was asked to pick from in a greedy decode of PROMPTS."""
    seen = []
    head = loaded.model.fast_head
    pick = head.argmax
    head.argmax = lambda x: seen.append(x.detach().clone()) or pick(x)
    engine = Engine(loaded, EngineConfig(parallel=len(PROMPTS), ctx_size=1024))
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(EngineRequest(f"r{i}", loaded.tokenizer.encode(prompt), params))
    while engine.has_work:
        engine.step()
    head.argmax = pick
    return torch.cat([x.reshape(-1, head.in_features) for x in seen])


def steps(loaded, streams_list: list[int], rounds: int = 10, per_round: int = 30) -> None:
    """Decode steps with the screen where the build uses it against without it, in one process."""
    limit = {"screen": gguf_gemv.screen_rows(), "whole head": 0}
    side = ["screen"]
    gguf_gemv.screen_rows = lambda lib=None: limit[side[0]]
    prompt = loaded.tokenizer.encode(PROMPTS[0])
    print(f"screened up to {limit['screen']} rows on this build; median step (ms)")
    for streams in streams_list:
        engine = Engine(loaded, EngineConfig(parallel=streams, ctx_size=2048, speculative="off"))
        params = SamplingParams(max_tokens=2 * rounds * per_round + 16, temperature=0.0, ignore_eos=True)
        for i in range(streams):
            engine.add_request(EngineRequest(f"r{i}", prompt, params))
        for _ in range(6):  # the prefill, then a few decode steps
            engine.step()
        times = alternating_steps(engine, list(limit), lambda name: side.__setitem__(0, name), rounds, per_round)
        screened, whole = (statistics.median(times[name]) for name in limit)
        wins = sum(a < b for a, b in zip(times["screen"], times["whole head"]))
        print(f"{streams} streams: screen {screened:.2f}, whole head {whole:.2f} ({whole / screened:.2f}x); "
              f"the screen's faster in {wins} of {rounds} rounds", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--isa", nargs="+", default=list(isa.runnable()))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", action="store_true", help="time whole decode steps with and without the screen")
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 2])
    args = parser.parse_args()
    torch.set_num_threads(2)
    loaded = load_model(weights="auto")
    if args.steps:
        return steps(loaded, args.streams)
    head = loaded.model.fast_head
    if head.formats != ["Q8_0"]:
        raise SystemExit(f"the head is {head.formats}, not Q8_0")
    states = hidden_states(loaded, args.tokens)
    shown = {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile"}
    print(f"{states.shape[0]} hidden states; cpu flags: {' '.join(sorted(isa.cpu_flags() & shown))}")
    print("build    rows   whole ms  screened ms  speed-up  not narrowed  same picks")
    for name in args.isa:
        lib = gguf_gemv.library(tuple(isa.march_flags(name)))
        screen = gguf_gemv.HeadScreen(head.raw0, head.in_features, lib=lib)
        for rows in args.rows:
            whole, screened, same, passes = [], [], True, 0
            for _ in range(args.rounds):
                for start in range(0, states.shape[0] - rows + 1, rows):
                    x = states[start:start + rows]
                    began = time.perf_counter()
                    expected = gguf_gemv.argmax(x, head.parts(), None, head.kernel_out_dtype, lib=lib)
                    whole.append(time.perf_counter() - began)
                    began = time.perf_counter()
                    got = screen.argmax(x, head.kernel_out_dtype)
                    screened.append(time.perf_counter() - began)
                    same &= got == expected
                    passes += 1
            w, s = statistics.median(whole) * 1e3, statistics.median(screened) * 1e3
            print(f"{name:8} {rows:4} {w:10.2f} {s:12.2f} {w / s:8.2f}x {screen.whole_head_passes:6}/{passes:<6} {same}")
            screen.whole_head_passes = 0


if __name__ == "__main__":
    main()
