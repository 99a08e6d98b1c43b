"""Engine logprobs as llama-server's `completion_probabilities` entries."""

from __future__ import annotations

import math

from inferd.api.llamacpp.pieces import token_bytes
from inferd.engine.outputs import TokenLogprobs
from inferd.models.tokenizer import Tokenizer


def _entry(tokenizer: Tokenizer, token_id: int, logprob: float, as_prob: bool) -> dict:
    return {
        "id": token_id,
        "token": tokenizer.decode([token_id], skip_special_tokens=False),
        "bytes": list(token_bytes(tokenizer, token_id)),
        **({"prob": math.exp(logprob)} if as_prob else {"logprob": logprob}),
    }


def completion_probabilities(tokenizer: Tokenizer, entries: list[TokenLogprobs], as_prob: bool = False) -> list[dict]:
    """`as_prob` (post_sampling_probs): "prob" and "top_probs" instead of "logprob" and
    "top_logprobs", as llama-server names them; the engine then gave the distribution the
    token was drawn from (after temperature, top_k, top_p and min_p, renormalized), so
    tokens cut away are not listed."""
    out = []
    for e in entries:
        item = _entry(tokenizer, e.token_id, e.logprob, as_prob)
        # A banned alternative has logprob -inf, which JSON cannot carry; it was never a candidate.
        item["top_probs" if as_prob else "top_logprobs"] = [
            _entry(tokenizer, t, lp, as_prob) for t, lp in e.top if math.isfinite(lp)]
        out.append(item)
    return out
