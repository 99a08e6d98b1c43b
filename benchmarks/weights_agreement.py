"""How closely quantized weights follow bf16: greedy agreement.

    python benchmarks/weights_agreement.py --weights mixed int8 int4 [--tokens 64]

For each prompt, bf16 decodes greedily; each scheme is then scored two ways:
- teacher-forced top-1 agreement: fed bf16's tokens, how often the scheme's
  argmax at each position is bf16's token (no divergence cascade);

Tokens go in one per step, so each scheme runs its decode-width path.
- free-running: the share of prompts whose greedy continuation is identical,
  and the mean length of the common prefix.
"""

from __future__ import annotations

import argparse

import torch

from inferd.arch.attention import AttentionMetadata, ContextView, DecodeGroup
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


class Decoder:
    """Feeds one token per step, as decoding does: the weights see one-row
    inputs, so each scheme's decode path (not its prefill path) is measured."""

    def __init__(self, loaded, max_len: int = 512):
        cfg = loaded.config
        if cfg.sliding_window and max_len > cfg.sliding_window:
            max_len = cfg.sliding_window  # one full view then serves every layer
        shape = (max_len, cfg.num_kv_heads, cfg.head_dim)
        self.loaded, self.max_len, self.length = loaded, max_len, 0
        self.caches = [(torch.zeros(shape, dtype=loaded.dtype), torch.zeros(shape, dtype=loaded.dtype))
                       for _ in range(cfg.num_layers)]

    def step(self, token: int) -> torch.Tensor:
        """Logits after `token`, appended at the next position."""
        n = self.length + 1
        if n > self.max_len:
            raise ValueError(f"keep prompts + tokens within {self.max_len}")
        view = ContextView(slots=torch.arange(n)[None, :], mask=torch.zeros(1, 1, 1, n))
        meta = AttentionMetadata(slot_mapping=torch.tensor([self.length]), decodes=[DecodeGroup(0, 1, view)])
        with torch.inference_mode():
            hidden = self.loaded.model(torch.tensor([token]), torch.tensor([self.length]), self.caches, meta)
            self.length = n
            return self.loaded.model.compute_logits(hidden)[0]


def teacher_forced_argmax(loaded, prompt: list[int], forced: list[int]) -> list[int]:
    """Argmax after each prefix prompt + forced[:i], for i in 0..len(forced)-1."""
    decoder = Decoder(loaded)
    tokens = prompt + forced[:-1]
    logits = [decoder.step(t) for t in tokens]
    return [int(row.argmax()) for row in logits[len(prompt) - 1:]]


def greedy(loaded, prompt: list[int], steps: int) -> list[int]:
    decoder = Decoder(loaded)
    for token in prompt[:-1]:
        decoder.step(token)
    out, token = [], prompt[-1]
    for _ in range(steps):
        token = int(decoder.step(token).argmax())
        out.append(token)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--weights", nargs="+", default=["mixed", "int8", "int4"])
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
            argmax = teacher_forced_argmax(loaded, prompt, want)
            agree += sum(a == b for a, b in zip(argmax, want))
            total += len(want)
            got = greedy(loaded, prompt, args.tokens)
            identical += got == want
            prefix += next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
        print(f"{scheme:>5}: teacher-forced top-1 agreement {agree / total:.1%}; "
              f"identical continuations {identical}/{len(prompts)}; mean common prefix {prefix / len(prompts):.1f} tokens")


if __name__ == "__main__":
    main()
