"""Prompt-lookup speculation with several requests decoding at once: the
engine alone, greedy, N requests started together, each a task of
`speculative.py` in turn, plain against speculating (`--spec-max-batch N`).

    python benchmarks/speculative_streams.py --streams 2 --tasks "edit code" "quote text" [--rounds 4] [--failing-drafts]

One warm-up run of each mode, then alternating rounds; prints each round's
aggregate decode tok/s (after every request's prefill step) and the median
of the rounds' ratios, whether the output was the same, and the guard's
learned row costs by batch size.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from speculative import TASKS, make_drafts_fail

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model


def run(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, dict[str, list[int]]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{i}", prompt, params))
    engine.step()  # every prompt's prefill
    tokens, outputs, start = 0, {}, time.perf_counter()
    while engine.has_work:
        for out in engine.step():
            tokens += len(out.token_ids)
            outputs.setdefault(out.request_id, []).extend(out.token_ids)
    return tokens / (time.perf_counter() - start), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=["edit code", "quote text"], choices=list(TASKS))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--failing-drafts", action="store_true", help="as speculative.py's: drafts hold by chance only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.failing_drafts:
        make_drafts_fail()
    loaded = load_model()
    prompts = [loaded.tokenizer.encode(TASKS[args.tasks[i % len(args.tasks)]]) for i in range(args.streams)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    engines = {mode: Engine(loaded, EngineConfig(parallel=args.streams, ctx_size=2048, speculative=mode,
                                                 spec_max_batch=args.streams))
               for mode in ("off", "ngram")}
    for mode in engines:
        run(engines[mode], prompts, params)  # warm-up
    ratios = []
    for r in range(args.rounds):
        order = ("off", "ngram") if r % 2 == 0 else ("ngram", "off")
        result = {mode: run(engines[mode], prompts, params) for mode in order}
        (off, plain), (spec, drafted) = result["off"], result["ngram"]
        ratios.append(spec / off)
        print(f"round {r + 1}: off {off:.1f} tok/s, ngram {spec:.1f} tok/s, same output {plain == drafted}")
    guard = engines["ngram"].speculator
    print(f"{args.streams} streams of {', '.join(args.tasks)}: ngram / off median {statistics.median(ratios):.2f}; "
          f"drafts accepted {guard.accepted_total} of {guard.drafted_total}; row costs by batch "
          f"{ {b: round(guard.costs.row_cost(b), 2) for b in sorted(guard.costs.batches)} }")


if __name__ == "__main__":
    main()
