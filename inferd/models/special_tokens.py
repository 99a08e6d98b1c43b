"""Well-known control token spellings that the vocabulary alone does not label."""

from __future__ import annotations

from dataclasses import dataclass

# Tokens that close an assistant turn in common chat formats. A model trained on
# one of these emits it, not its eos token, when it finishes a reply.
END_OF_TURN_TOKENS = (
    "<end_of_turn>",  # Gemma
    "<|im_end|>",  # ChatML (Qwen, SmolLM, ...)
    "<|eot_id|>",  # Llama 3
    "<|eom_id|>",  # Llama 3.1, after a tool call
    "<|end|>",  # Phi-3
    "<|endoftext|>",  # GPT-2 lineage, Qwen, Phi
)


@dataclass(frozen=True)
class FimTokens:
    """Ids that frame a fill-in-the-middle prompt: prefix, then suffix, then the model writes the middle."""

    prefix: int
    suffix: int
    middle: int


# (prefix, suffix, middle) spellings used by code models.
FIM_SPELLINGS = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, CodeGemma
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    ("<|fim▁begin|>", "<|fim▁hole|>", "<|fim▁end|>"),
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),  # Code Llama
)
