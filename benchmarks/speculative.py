"""Single-stream decode with and without prompt-lookup speculation, on
input-grounded tasks (edit a piece of code, answer with quotes from a text)
and one that is not (a free story, where drafts rarely hold): the engine
alone, greedy, the bundled model by default.

    python benchmarks/speculative.py [--weights auto] [--rounds 3] [--spec-tokens 4] [--draft-model PATH]

Each round runs every task once plain and once speculating, alternating
which goes first, so a noisy host affects both alike. Prints decode tok/s
per task (the fastest round) and overall, the draft acceptance rate, the
verified rows' cost the guard learned (one more row's share of a plain
step), and whether both produced the same tokens.
"""

from __future__ import annotations

import argparse
import time

import torch

from inferd.config import EngineConfig
from inferd.engine import speculative
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model

CODE = '''def moving_average(values, window):
    """The mean of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            averages.append(total / window)
    return averages


def main():
    readings = [3.0, 4.5, 2.0, 8.0, 7.5, 6.0, 9.5]
    for average in moving_average(readings, 3):
        print(f"{average:.2f}")
'''

TEXT = ("The lighthouse at Point Avery was built in 1871 from granite quarried on the island itself. "
        "Its first keeper, Margaret Hollis, kept a log for thirty-one years, recording every ship that passed "
        "and every storm that closed the harbour. In 1923 the lamp was electrified, and the keeper's cottage "
        "became a museum in 1962. Today the light still turns every night, though no one lives beside it; "
        "a sensor in the lantern room reports to the coast guard station forty miles away.")

# Plain-text continuations rather than chat turns: the bundled 270M model follows "copy this" far
# more reliably when the text itself sets up the copy.
TASKS = {
    "edit code": f"```python\n{CODE}```\n\nThe same code with moving_average renamed to rolling_mean:\n\n```python\n",
    "quote text": f"{TEXT}\n\nQuestion: What does the text say about the keeper and the lamp? Answer with quotes "
                  f"from the text.\nAnswer: The text says: \"Its first keeper,",
    # Not grounded in its input: here the acceptance guard should keep speculation from costing anything.
    "free story": "Write a short story about a fox who learns to sail.\n\nStory: The fox had never seen the sea",
    # Each number new: a one-token match (", ") always proposes a draft, and it rarely holds.
    "primes": "The prime numbers below 1000, in order: 2, 3, 5, 7, 11,",
}


def make_drafts_fail() -> None:
    """The guard's worst case: each lookup's first token replaced by another, so a draft
    holds only by chance, proposed as often as before."""
    lookup = speculative.propose_ngram
    speculative.propose_ngram = lambda tokens, n, **kw: [(t + 1) % 1000 if i == 0 else t
                                                         for i, t in enumerate(lookup(tokens, n, **kw))]


def run(engine: Engine, prompt: list[int], params: SamplingParams) -> tuple[list[int], int, float]:
    """All output tokens, how many came after the first, and in how many seconds (decode only)."""
    engine.add_request(EngineRequest("bench", prompt, params))
    tokens: list[int] = []
    while not tokens and engine.has_work:  # prefill, up to the first token
        for out in engine.step():
            tokens.extend(out.token_ids)
    first = len(tokens)
    start = time.perf_counter()
    while engine.has_work:
        for out in engine.step():
            tokens.extend(out.token_ids)
    return tokens, len(tokens) - first, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the bundled model")
    parser.add_argument("--weights", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--spec-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft-model", default=None, help="drafts from this model instead of prompt lookup")
    parser.add_argument("--failing-drafts", action="store_true",
                        help="the guard's worst case: each lookup's first token is replaced by another, so a draft "
                             "holds only by chance (drafted as often as before)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.failing_drafts:
        make_drafts_fail()
    loaded = load_model(args.model, weights=args.weights)
    engines = {  # the weights are shared; each engine has its own KV cache
        mode: Engine(loaded, EngineConfig(parallel=1, ctx_size=2048, speculative=mode, spec_tokens=args.spec_tokens,
                                          draft_model=args.draft_model if mode != "off" else None))
        for mode in ("off", "ngram")
    }
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    prompts = {task: loaded.tokenizer.encode(text) for task, text in TASKS.items()}
    best: dict[tuple[str, str], tuple[int, float]] = {}
    outputs: dict[tuple[str, str], list[int]] = {}
    for round_ in range(args.rounds):
        order = ("off", "ngram") if round_ % 2 == 0 else ("ngram", "off")
        for task, prompt in prompts.items():
            for mode in order:
                tokens, decoded, seconds = run(engines[mode], prompt, params)
                outputs[task, mode] = tokens
                print(f"round {round_ + 1}, {task}, {mode}: {decoded} tokens in {seconds:.2f} s", flush=True)
                if (task, mode) not in best or seconds < best[task, mode][1]:
                    best[task, mode] = (decoded, seconds)
    print(f"{'task':<12} {'tokens':>6} {'off tok/s':>10} {'ngram tok/s':>12} {'ratio':>6}  same output")
    totals = {"off": [0, 0.0], "ngram": [0, 0.0]}
    for task in TASKS:
        rates = {}
        for mode in ("off", "ngram"):
            n, seconds = best[task, mode]
            rates[mode] = n / seconds
            totals[mode][0] += n
            totals[mode][1] += seconds
        same = outputs[task, "off"] == outputs[task, "ngram"]
        print(f"{task:<12} {best[task, 'off'][0]:>6} {rates['off']:>10.1f} {rates['ngram']:>12.1f} "
              f"{rates['ngram'] / rates['off']:>6.2f}  {same}")
    overall = {mode: n / s for mode, (n, s) in totals.items()}
    print(f"{'overall':<12} {totals['off'][0]:>6} {overall['off']:>10.1f} {overall['ngram']:>12.1f} "
          f"{overall['ngram'] / overall['off']:>6.2f}")
    spec = engines["ngram"].speculator
    print(f"drafts accepted: {spec.accepted_total} of {spec.drafted_total} "
          f"({spec.accepted_total / max(spec.drafted_total, 1):.0%})")
    costs = spec.costs
    alone = costs.batches.get(1)
    if alone is not None and alone.plain_seconds is not None:
        print(f"guard's step costs: plain {alone.plain_seconds * 1000:.1f} ms, each verified row "
              f"+{costs.row_cost():.2f} of that")
    for task in TASKS:
        print(f"--- {task}, speculating:\n{loaded.tokenizer.decode(outputs[task, 'ngram'])}")


if __name__ == "__main__":
    main()
