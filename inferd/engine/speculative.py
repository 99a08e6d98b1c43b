"""Prompt-lookup speculative decoding: drafts come from the request's own
tokens, and one forward pass verifies them.

Proposing: the last n tokens of prompt + output (n from `max_n` down to
`min_n`) are looked up at their most recent earlier occurrence; the tokens
that followed it are the draft (at most `num_tokens`, never past max_tokens
or the context). Output that copies from its input (editing code, quoting
a text) is where such drafts hold.

Verifying (the engine's step): the request computes its last token plus the
drafts, the sampler picks a token at each of those positions as if the
preceding drafts had been sampled, and the longest prefix of drafts equal to
those picks is kept, plus the pick after it. Only greedy requests speculate,
so every kept token is the one plain decoding would have produced.

When it does not pay:
- per request, once `GUARD_MIN_DRAFTED` draft tokens have been verified and
  fewer than `GUARD_MIN_RATE` of them were accepted, it stops proposing;
- engine-wide, nothing is proposed while more than `max_batch` requests run:
  a wide batch is no longer bound by reading the weights, so verifying
  drafts costs about as much as the tokens it saves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inferd.engine.request import Request, RequestStatus

METHODS = ("off", "ngram")
GUARD_MIN_DRAFTED = 16
GUARD_MIN_RATE = 0.25


def can_speculate(req: Request) -> bool:
    """Only requests whose next token each sampler row decides alone: greedy,
    no grammar (its state moves per token), no thinking budget (it forces a
    token once spent), no logprobs."""
    params, steering = req.params, req.steering
    if not params.greedy or params.logprobs is not None or steering.constraint is not None:
        return False
    return steering.thinking is None or steering.thinking.budget is None


def propose_ngram(tokens: list[int], num_tokens: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """Up to `num_tokens` that followed the most recent earlier occurrence of
    the longest matching suffix of `tokens` (between max_n and min_n long)."""
    length = len(tokens)
    if num_tokens < 1 or length < min_n + 1:
        return []
    ids = np.asarray(tokens, dtype=np.int64)
    ends = np.flatnonzero(ids[:-1] == ids[-1])  # where an earlier occurrence of the suffix could end
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        found = ends[ends >= n - 1]
        for back in range(1, n):
            found = found[ids[found - back] == ids[length - 1 - back]]
        if found.size:
            start = int(found[-1]) + 1
            return ids[start : min(start + num_tokens, length)].tolist()
    return []


@dataclass
class DraftRecord:
    drafted: int = 0
    accepted: int = 0

    @property
    def failing(self) -> bool:
        return self.drafted >= GUARD_MIN_DRAFTED and self.accepted < GUARD_MIN_RATE * self.drafted


class Speculator:
    """Sets each eligible running request's `draft_token_ids` before a step and
    keeps the per-request acceptance record for the guard."""

    def __init__(self, method: str, num_tokens: int, max_batch: int, max_model_len: int):
        if method not in METHODS:
            raise ValueError(f"--speculative must be one of {', '.join(METHODS)}, got {method!r}")
        if num_tokens < 1:
            raise ValueError(f"--spec-tokens must be at least 1, got {num_tokens}")
        self.enabled = method != "off"
        self.num_tokens = num_tokens
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self.records: dict[str, DraftRecord] = {}
        self.drafted_total = 0
        self.accepted_total = 0

    def propose(self, running: list[Request]) -> None:
        for req in running:
            req.draft_token_ids = []  # a request left out of the last step may still hold some
        if not self.enabled or len(running) > self.max_batch:
            return
        for req in running:
            if req.num_computed_tokens != req.num_tokens - 1 or not can_speculate(req):
                continue  # still prefilling, or not exactly verifiable
            record = self.records.get(req.request_id)
            if record is not None and record.failing:
                continue
            room = self.max_model_len - req.num_tokens - 1
            if req.params.max_tokens is not None:  # the token after the drafts counts too
                room = min(room, req.params.max_tokens - len(req.output_token_ids) - 1)
            req.draft_token_ids = propose_ngram(req.all_token_ids, min(self.num_tokens, room))

    def record(self, req: Request, drafted: int, accepted: int) -> None:
        self.drafted_total += drafted
        self.accepted_total += accepted
        if req.status is not RequestStatus.RUNNING:
            return  # finished: already forgotten
        record = self.records.setdefault(req.request_id, DraftRecord())
        record.drafted += drafted
        record.accepted += accepted

    def forget(self, request_id: str) -> None:
        self.records.pop(request_id, None)
