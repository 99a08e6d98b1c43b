"""llama-server's prompt shapes turned into token id lists.

A list holding only ids, or ids and text mixed, is one prompt; any other list
(only text, or nested lists) is several prompts. BOS is added only when a
prompt starts with text, as llama-server does.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferd.api.llamacpp.protocol import Prompt, PromptPart
from inferd.models.tokenizer import Tokenizer
from inferd.http.errors import BadRequest


def split_prompts(prompt: Prompt) -> list[str | list[PromptPart]]:
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise BadRequest("prompt must not be an empty list; send text or token ids", param="prompt")
    flat = all(isinstance(p, (int, str)) for p in prompt)
    if flat and any(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    for i, p in enumerate(prompt):
        if isinstance(p, int):
            raise BadRequest(
                f"prompt[{i}] is a bare token id in a list of prompts; put token ids inside each prompt's own list",
                param="prompt",
            )
        if isinstance(p, list) and not p:
            raise BadRequest(f"prompt[{i}] is an empty list; send text or token ids", param="prompt")
    return list(prompt)


def tokenize_prompt(tokenizer: Tokenizer, prompt: str | Sequence[PromptPart], add_special: bool = True) -> list[int]:
    """Token ids of one prompt; only text in first place gets BOS (when `add_special`)."""
    parts = [prompt] if isinstance(prompt, str) else prompt
    ids: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            ids += tokenizer.encode(part, add_special_tokens=add_special and i == 0)
        else:
            ids.append(part)
    return ids
