"""How closely quantized weights follow bf16: greedy agreement.

    python benchmarks/weights_agreement.py --weights int8 int4 auto [--tokens 64]

For each prompt, bf16 decodes greedily; each scheme is then scored two ways:
- teacher-forced top-1 agreement: fed bf16's tokens, how often the scheme's
  argmax at each position is bf16's token (no divergence cascade);
- free-running: the share of prompts whose greedy continuation is identical,
  and the mean length of the common prefix.
"""

from __future__ import annotations

import argparse

import torch

from inferd.arch.attention import AttentionMetadata, ContextView, PrefillSpan
from inferd.models.loader import load_model

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works to a ten-year-old.",
    "List five tips for learning a new language quickly.",
    "What is the capital of Australia, and why was it chosen?",
    "def fibonacci(n):",
    "The three laws of thermodynamics are",
    "Translate to French: The weather is lovely today and we are going to the beach.",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "Q: If a train travels 60 miles in 1.5 hours, what is its average speed?\nA:",
    "Once upon a time, in a village at the edge of a great forest,",
    "Write a haiku about autumn rain.",
    "Give me a recipe for a simple tomato pasta sauce.",
]


def forward_logits(loaded, tokens: list[int]) -> torch.Tensor:
    """Logits at every position of `tokens` (one cold prefill, no cache reuse)."""
    cfg, n = loaded.config, len(tokens)
    shape = (n, cfg.num_kv_heads, cfg.head_dim)
    caches = [(torch.zeros(shape, dtype=loaded.dtype), torch.zeros(shape, dtype=loaded.dtype)) for _ in range(cfg.num_layers)]
    span = PrefillSpan(0, n, cold=True, full=ContextView(slots=None, mask=None))
    if cfg.sliding_window and n > cfg.sliding_window:
        raise ValueError("keep prompts + tokens within the sliding window")
    meta = AttentionMetadata(slot_mapping=torch.arange(n), prefills=[span])
    with torch.inference_mode():
        hidden = loaded.model(torch.tensor(tokens), torch.arange(n), caches, meta)
        return loaded.model.compute_logits(hidden)


def greedy(loaded, prompt: list[int], steps: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(steps):
        tokens.append(int(forward_logits(loaded, tokens)[-1].argmax()))
    return tokens[len(prompt):]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--weights", nargs="+", default=["int8", "int4", "auto"])
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    reference = load_model(args.model, "bfloat16", "cpu", "bf16")
    prompts = [reference.tokenizer.encode(p) for p in PROMPTS]
    expected = [greedy(reference, p, args.tokens) for p in prompts]
    print(f"{len(prompts)} prompts x {args.tokens} greedy tokens, against bf16")
    for scheme in args.weights:
        loaded = load_model(args.model, "bfloat16", "cpu", scheme)
        agree = total = identical = prefix = 0
        for prompt, want in zip(prompts, expected):
            argmax = forward_logits(loaded, prompt + want[:-1])[len(prompt) - 1 :].argmax(-1).tolist()
            agree += sum(a == b for a, b in zip(argmax, want))
            total += len(want)
            got = greedy(loaded, prompt, args.tokens)
            identical += got == want
            prefix += next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
        print(f"{scheme:>5}: teacher-forced top-1 agreement {agree / total:.1%}; "
              f"identical continuations {identical}/{len(prompts)}; mean common prefix {prefix / len(prompts):.1f} tokens")


if __name__ == "__main__":
    main()
