"""Engine logprobs as llama-server's `completion_probabilities` entries."""

from __future__ import annotations

import math

from inferd.api.llamacpp.pieces import token_bytes
from inferd.engine.outputs import TokenLogprobs
from inferd.models.tokenizer import Tokenizer


def _entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> dict:
    return {
        "id": token_id,
        "token": tokenizer.decode([token_id], skip_special_tokens=False),
        "bytes": list(token_bytes(tokenizer, token_id)),
        "logprob": logprob,
    }


def completion_probabilities(tokenizer: Tokenizer, entries: list[TokenLogprobs]) -> list[dict]:
    out = []
    for e in entries:
        item = _entry(tokenizer, e.token_id, e.logprob)
        # A banned alternative has logprob -inf, which JSON cannot carry; it was never a candidate.
        item["top_logprobs"] = [_entry(tokenizer, t, lp) for t, lp in e.top if math.isfinite(lp)]
        out.append(item)
    return out
