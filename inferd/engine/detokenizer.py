"""Turning generated token ids into streamed text, a few tokens at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from inferd.engine.stop_strings import StopStringMatcher

REPLACEMENT_CHAR = "\ufffd"

# Prompt tokens decoded ahead of the output, so the first output token reads
# as a continuation (a SentencePiece "▁word" keeps its space instead of being
# treated as the start of the text).
_PROMPT_CONTEXT_TOKENS = 5
# A UTF-8 character is at most 4 bytes, so it is spelled out over at most 4
# tokens; text still ending in U+FFFD after that many holds an invalid byte.
_MAX_CHAR_TOKENS = 4
# An unfinished character is at most 3 bytes, rendered as at most 3 U+FFFD.
_MAX_UNFINISHED_CHARS = 3
# After this many tokens without a clean end, everything is released so the
# decode window (and so the cost of each token) stays bounded.
_MAX_UNSETTLED_TOKENS = 16
# The window keeps its start over tokens without text only up to this length.
_MAX_WINDOW_TOKENS = 2 * _MAX_UNSETTLED_TOKENS


class TokenDecoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


@dataclass
class DetokenizerDelta:
    text: str  # new text safe to emit now
    stop_string: str | None  # the stop string that matched in this call, if any (generation must end)


class _DecodeWindow:
    """Decodes one token at a time by decoding only a short window of recent tokens.

    Tokens before `_read_offset` are settled: their text has been released.
    The window starts at the last settled stretch that has text of its own
    (`_prefix_offset`), so new tokens are rendered in context; the text they
    add is whatever the window's decode has beyond the settled part.
    """

    def __init__(self, tokenizer: TokenDecoder, context_ids: list[int], skip_special_tokens: bool):
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._ids = context_ids
        self._prefix_offset = 0
        self._read_offset = len(context_ids)
        self._prefix_text = self._decode(0, len(context_ids))
        # Characters past `_prefix_text` already released while unsettled.
        self._released_past_prefix = 0
        self._unsettled_tokens = 0

    def push(self, token_id: int) -> str:
        """Adds one token; returns the text that is now final."""
        self._ids.append(token_id)
        text = self._decode(self._prefix_offset, len(self._ids))
        if not text.endswith(REPLACEMENT_CHAR):
            return self._settle(text)
        self._unsettled_tokens += 1
        if self._unsettled_tokens >= _MAX_UNSETTLED_TOKENS:
            return self._settle(text)
        # The trailing U+FFFD may be a character whose remaining bytes are in
        # tokens still to come; hold it. Past the longest character only its
        # last few can still be one.
        held = len(text) - len(text.rstrip(REPLACEMENT_CHAR))
        if self._unsettled_tokens >= _MAX_CHAR_TOKENS:
            held = min(held, _MAX_UNFINISHED_CHARS)
        return self._release_up_to(text, len(text) - held)

    def finish(self) -> str:
        """No more tokens: returns whatever was held back, as decoded."""
        if self._unsettled_tokens == 0:
            return ""
        return self._settle(self._decode(self._prefix_offset, len(self._ids)))

    def _decode(self, start: int, end: int) -> str:
        return self._tokenizer.decode(self._ids[start:end], skip_special_tokens=self._skip_special_tokens)

    def _released_len(self) -> int:
        return len(self._prefix_text) + self._released_past_prefix

    def _release_up_to(self, text: str, end: int) -> str:
        piece = text[self._released_len():end]
        self._released_past_prefix += len(piece)
        return piece

    def _settle(self, text: str) -> str:
        piece = text[self._released_len():]
        settled_text = self._decode(self._read_offset, len(self._ids))
        if settled_text or len(self._ids) - self._prefix_offset >= _MAX_WINDOW_TOKENS:
            self._prefix_offset, self._prefix_text = self._read_offset, settled_text
        else:
            # Tokens with no text of their own (skipped special tokens, a bare
            # "▁") would leave the next token without context: keep the start.
            self._prefix_text = text
        self._read_offset = len(self._ids)
        self._released_past_prefix = 0
        self._unsettled_tokens = 0
        return piece


def _prompt_context(tokenizer: TokenDecoder, prompt_ids: Sequence[int], skip_special_tokens: bool) -> list[int]:
    """The last few prompt tokens, reaching back a little where they alone would mislead."""
    prompt_tail = [int(t) for t in prompt_ids[-2 * _PROMPT_CONTEXT_TOKENS:]]
    start = max(len(prompt_tail) - _PROMPT_CONTEXT_TOKENS, 0)
    # Context starting inside a character renders its stray bytes as U+FFFD
    # (with byte fallback they could even fuse with the output's bytes), and
    # context without text (only skipped special tokens) would let the first
    # output token be taken for the start of the text.
    while start > 0:
        text = tokenizer.decode(prompt_tail[start:], skip_special_tokens=skip_special_tokens)
        if text and not text.startswith(REPLACEMENT_CHAR):
            break
        start -= 1
    return prompt_tail[start:]


class IncrementalDetokenizer:
    """Streams the text of one sequence's generated tokens.

    The text is what the output tokens add after the prompt's text; with an
    empty prompt (or one that does not change how the output renders) it is
    exactly `tokenizer.decode(output_ids)`. Deltas never end inside a
    multi-byte character and never contain part of a stop string.
    """

    def __init__(
        self,
        tokenizer: TokenDecoder,
        prompt_token_ids: Sequence[int],
        *,
        skip_special_tokens: bool = True,
        stop: Sequence[str] = (),
        include_stop_str_in_output: bool = False,
    ):
        context = _prompt_context(tokenizer, prompt_token_ids, skip_special_tokens)
        self._window = _DecodeWindow(tokenizer, context, skip_special_tokens)
        self._stops = StopStringMatcher(stop, include_stop_str_in_output=include_stop_str_in_output)
        self._output_text = ""
        self._finished = False

    def add_tokens(self, token_ids: Sequence[int]) -> DetokenizerDelta:
        if self._finished:
            return DetokenizerDelta("", None)
        decoded = "".join(self._window.push(int(t)) for t in token_ids)
        released, stop_string = self._stops.feed(decoded)
        if stop_string is not None:
            self._finished = True
        self._output_text += released
        return DetokenizerDelta(released, stop_string)

    def flush(self) -> str:
        """Generation ended for another reason: releases the text held back."""
        if self._finished:
            return ""
        self._finished = True
        released, stop_string = self._stops.feed(self._window.finish())
        if stop_string is None:
            released += self._stops.flush()
        self._output_text += released
        return released

    @property
    def output_text(self) -> str:
        return self._output_text
