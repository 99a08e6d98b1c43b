"""Tokenizing a request's text without holding the event loop: the work runs
on a worker thread (the tokenizer lets go of the GIL for long texts), and a
prompt that cannot fit the context is refused before it is tokenized at all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from inferd.http.errors import ContextSizeExceeded
from inferd.models.tokenizer import Tokenizer

T = TypeVar("T")


def check_fits(tokenizer: Tokenizer, text: str, context: int, param: str = "prompt") -> None:
    """Refuse `text` when even its fewest possible tokens exceed `context`."""
    # A token stands for at least one character, so such a text fits without the bound
    # (the longest piece: half a second to find in a 262k vocabulary, holding the GIL).
    if len(text) <= context:
        return
    fewest = tokenizer.fewest_tokens(text)
    if fewest > context:
        raise ContextSizeExceeded(f"the prompt is at least {fewest} tokens ({len(text)} characters), more than the "
                                  f"model's context of {context} tokens; shorten it", fewest, context, param=param)


async def off_loop(work: Callable[..., T], *args) -> T:
    """`work(*args)` on a worker thread: templates and tokenizers are CPU work."""
    return await asyncio.to_thread(work, *args)


def encode_checked(tokenizer: Tokenizer, text: str, context: int, param: str = "prompt") -> list[int]:
    """The token ids of a prompt that is to run in a context of `context` tokens (on a worker thread)."""
    check_fits(tokenizer, text, context, param)
    return tokenizer.encode(text)


async def encode_prompt(tokenizer: Tokenizer, text: str, context: int, param: str = "prompt") -> list[int]:
    return await off_loop(encode_checked, tokenizer, text, context, param)
