"""Logit processing: the request-driven adjustments made before anything is
drawn, stages 1-4 of the order in `sampler`: steering (a forced token, else
the grammar mask), logit_bias, penalties, min_tokens masking. Each of the
last three gathers the token ids of all rows that need it into one index into
the flattened [N * V] logits, so it runs as one batched update rather than a
loop over rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from inferd.engine.sampling.errors import SamplerError
from inferd.engine.sampling.grammar_mask import mask_disallowed

if TYPE_CHECKING:
    from inferd.engine.sampling.sampler import SampleRow


def adjusts_logits(row: SampleRow) -> bool:
    """Some stage of `process_logits` changes this row's logits this step."""
    params = row.params
    return (row.forced_token is not None or row.grammar is not None or bool(params.logit_bias)
            or params.repetition_penalty != 1.0
            or ((params.presence_penalty != 0.0 or params.frequency_penalty != 0.0) and len(row.output_token_ids) > 0)
            or len(row.output_token_ids) < params.min_tokens)


def process_logits(
    logits: torch.Tensor, rows: Sequence[SampleRow], out: torch.Tensor | None = None
) -> torch.Tensor:
    """logits [N, V] -> float32 [N, V] after steering, logit_bias, penalties and min_tokens masking.

    Repetition penalty (prompt + output tokens) comes first, then frequency and
    presence penalties (output tokens only): x - frequency * count - presence.
    The input is never modified: it is returned as-is when it is contiguous
    float32 and no row needs any of these stages; otherwise the result is
    written to `out` (a float32 [N, V] tensor) when given, or a new tensor.
    """
    vocab = logits.shape[-1]
    forced = [i for i, row in enumerate(rows) if row.forced_token is not None]
    # A forced token replaces the whole row, so a grammar has nothing left to mask there.
    constrained = [i for i, row in enumerate(rows) if row.grammar is not None and row.forced_token is None]
    biased = [i for i, row in enumerate(rows) if row.params.logit_bias]
    repeated = [i for i, row in enumerate(rows) if row.params.repetition_penalty != 1.0]
    penalised = [
        i
        for i, row in enumerate(rows)
        if (row.params.presence_penalty != 0.0 or row.params.frequency_penalty != 0.0) and len(row.output_token_ids)
    ]
    held = [i for i, row in enumerate(rows) if len(row.output_token_ids) < row.params.min_tokens]

    unchanged = not (forced or constrained or biased or repeated or penalised or held)
    if unchanged and logits.dtype == torch.float32 and logits.is_contiguous():
        return logits
    x = out if out is not None else torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    x.copy_(logits)
    if unchanged:
        return x
    flat = x.view(-1)

    if constrained:
        mask_disallowed(x, constrained, [rows[i].grammar for i in constrained])
    for i in forced:
        x[i].fill_(-torch.inf)
        x[i, rows[i].forced_token] = 0.0

    if biased:
        ids, _ = _flat_ids(biased, [list(rows[i].params.logit_bias) for i in biased], vocab, x.device)
        bias = [value for i in biased for value in rows[i].params.logit_bias.values()]
        flat.index_add_(0, ids, torch.tensor(bias, dtype=torch.float32, device=x.device))

    if repeated:
        seqs = [_concat_ids(rows[i].prompt_token_ids, rows[i].output_token_ids) for i in repeated]
        ids, owners = _flat_ids(repeated, seqs, vocab, x.device)
        penalty = torch.tensor(
            [rows[i].params.repetition_penalty for i in repeated], dtype=torch.float32, device=x.device
        )[owners]
        # A token seen twice is written twice with the same value, so duplicates are harmless.
        seen = flat[ids]
        flat[ids] = torch.where(seen > 0, seen / penalty, seen * penalty)

    if penalised:
        ids, _ = _flat_ids(penalised, [rows[i].output_token_ids for i in penalised], vocab, x.device)
        ids, counts = torch.unique(ids, return_counts=True)
        row_of = ids // vocab
        frequency = torch.tensor([row.params.frequency_penalty for row in rows], dtype=torch.float32, device=x.device)
        presence = torch.tensor([row.params.presence_penalty for row in rows], dtype=torch.float32, device=x.device)
        flat[ids] = flat[ids] - frequency[row_of] * counts - presence[row_of]

    if held:
        banned = [sorted(rows[i].eos_token_ids | set(rows[i].params.stop_token_ids)) for i in held]
        ids, _ = _flat_ids(held, banned, vocab, x.device)
        flat[ids] = -torch.inf
    return x


def _concat_ids(first: Sequence[int], second: Sequence[int]) -> torch.Tensor:
    return torch.cat((_as_ids(first), _as_ids(second)))


def _as_ids(seq: Sequence[int] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(seq, dtype=torch.long).reshape(-1).cpu()


def _flat_ids(
    positions: list[int], seqs: Sequence[Sequence[int] | torch.Tensor], vocab: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of each row as indices into the flattened [N * V] logits, plus each id's owner (0..len(positions))."""
    parts = [_as_ids(seq) for seq in seqs]
    ids = torch.cat(parts)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        bad = ids[(ids < 0) | (ids >= vocab)][0].item()
        raise SamplerError(f"token id {bad} is outside the vocabulary [0, {vocab})")
    owners = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([p.numel() for p in parts]))
    flat = torch.tensor(positions, dtype=torch.long)[owners] * vocab + ids
    return flat.to(device), owners.to(device)
