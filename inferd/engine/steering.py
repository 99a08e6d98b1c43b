"""Per-request steering of the next token, applied to the batch's logits
before sampling: a forced </think> (thinking budget), else the grammar's
allowed set. Reasoning tokens are never shown to the grammar."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from inferd.engine.request import Request


def _grammar_active(req: Request) -> bool:
    return req.constraint is not None and not (req.thinking is not None and req.thinking.in_reasoning)


@torch.inference_mode()  # the logits are inference tensors; edit them in that mode
def steer(logits: torch.Tensor, requests: Sequence[Request]) -> torch.Tensor:
    grammar_rows = [i for i, r in enumerate(requests) if _grammar_active(r)]
    if grammar_rows:
        from inferd.chat.grammar import allocate_bitmask, apply_bitmask

        bitmask = allocate_bitmask(len(grammar_rows), logits.shape[1])
        for k, i in enumerate(grammar_rows):
            requests[i].constraint.fill_mask(bitmask, k)
        index = torch.tensor(grammar_rows)
        rows = logits[index]
        apply_bitmask(rows, bitmask)
        logits[index] = rows
    for i, req in enumerate(requests):
        forced = req.thinking.forced_token() if req.thinking is not None else None
        if forced is not None:
            logits[i].fill_(float("-inf"))
            logits[i, forced] = 0.0
    return logits


def advance_steering(req: Request, token: int) -> bool:
    """Record the sampled token; True when the grammar is complete (generation ends)."""
    grammar_was_active = _grammar_active(req)
    if req.thinking is not None:
        req.thinking.add(token)
    if grammar_was_active:
        req.constraint.accept(token)
        if req.constraint.finished and req.constraint.error:  # a parser limit, not a complete output
            raise ValueError(req.constraint.error)
        return req.constraint.finished
    return False
