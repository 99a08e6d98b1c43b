"""Turning a token budget into text: exactly, through the server's /tokenize and
/detokenize, or approximately, one word per token, when the server lacks them."""

from __future__ import annotations

import random
from typing import Protocol

import httpx

from inferd.bench.words import WORDS


class TextMaker(Protocol):
    def make(self, rng: random.Random, num_tokens: int) -> str: ...


class WordTextMaker:
    """One word per token: servers without /tokenize get prompts of about the right size."""

    def make(self, rng: random.Random, num_tokens: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(num_tokens))


class ServerTextMaker:
    """Text that the server's own tokenizer reads as exactly `num_tokens` tokens (when it can)."""

    def __init__(self, http: httpx.Client):
        self.http = http

    def encode(self, text: str) -> list[int]:
        r = self.http.post("/tokenize", json={"content": text, "add_special": False})
        r.raise_for_status()
        return r.json()["tokens"]

    def decode(self, ids: list[int]) -> str:
        r = self.http.post("/detokenize", json={"tokens": ids})
        r.raise_for_status()
        return r.json()["content"]

    def make(self, rng: random.Random, num_tokens: int) -> str:
        if num_tokens <= 0:
            return ""
        words = WordTextMaker().make(rng, num_tokens * 2)
        ids = self.encode(words)
        while len(ids) < num_tokens:
            ids += self.encode(" " + WordTextMaker().make(rng, num_tokens))
        # Cutting ids can split a word so that decoding and re-encoding changes the count;
        # nudge the cut a few times and keep the closest.
        cut, best = num_tokens, None
        for _ in range(4):
            text = self.decode(ids[:cut])
            count = len(self.encode(text))
            if best is None or abs(count - num_tokens) < abs(best[1] - num_tokens):
                best = (text, count)
            if count == num_tokens:
                break
            cut = max(1, cut + num_tokens - count)
        return best[0]


def text_maker_for(http: httpx.Client) -> TextMaker:
    """The server's tokenizer when /tokenize answers, else words."""
    try:
        ServerTextMaker(http).encode("probe")
    except (httpx.HTTPError, KeyError, ValueError):
        return WordTextMaker()
    return ServerTextMaker(http)
