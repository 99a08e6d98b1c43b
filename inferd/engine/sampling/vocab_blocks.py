"""Sampling operations over the vocabulary in fixed-width blocks.

One cheap pass of per-block maxima or sums tells which few blocks of a row
matter, and only those are looked at closely: argmax reads one block, a draw
one block of sums, top-k/top-p candidates and logprob top entries the blocks
with the largest maxima. Everything here takes tensors only and knows nothing
of requests: `inferd.engine.sampling.sampler` decides which rows take which path.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

# Maxima come from narrow blocks, so that a handful of likely tokens scattered
# over the vocabulary pins down few elements; sums for the draw come from wide
# blocks, so that the search within the chosen block stays short.
_MAX_BLOCK = 64
_SUM_BLOCK = 512
# Fewest blocks (by their maximum) searched for top_k/top_p candidates, and how
# many candidates a top_p row fetches first; more when a nucleus is larger.
_FEWEST_BLOCKS = 256
_FIRST_NUCLEUS = 256
_NUCLEUS_GROWTH = 16
# Weights that underflowed to zero can never be drawn; keeping them out of
# every support stops a cut from tying with the whole zero tail.
_SMALLEST_WEIGHT = float(torch.finfo(torch.float32).smallest_normal) * 2.0**-23


# ---------------------------------------------------------------------------
# Blocks of the vocabulary.


def _per_block(t: torch.Tensor, reduce: Callable[..., torch.Tensor], block: int) -> torch.Tensor:
    """reduce(dim=-1) over consecutive `block`-wide slices of each row: [n, ceil(V / block)]; the last may be partial."""
    vocab = t.shape[1]
    whole = vocab // block
    parts = []
    if whole:
        parts.append(reduce(t[:, : whole * block].unflatten(1, (whole, block)), dim=-1))
    if vocab % block:
        parts.append(reduce(t[:, whole * block :], dim=-1, keepdim=True))
    return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def block_maxima(t: torch.Tensor) -> torch.Tensor:
    """Per-row maxima of consecutive _MAX_BLOCK-wide blocks: [n, ceil(V / _MAX_BLOCK)]."""
    return _per_block(t, torch.amax, _MAX_BLOCK)


def _block_sums(t: torch.Tensor) -> torch.Tensor:
    return _per_block(t, torch.sum, _SUM_BLOCK)


def _gather_blocks(
    t: torch.Tensor, blocks: torch.Tensor, block: int, fill: float, rows: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Values and token ids of whole `block`-wide blocks [m, b] -> [m, b * block], from t's rows (or t[rows]).

    Columns past the end of the vocabulary (in a partial last block) read as `fill`.
    """
    vocab = t.shape[1]
    columns = (blocks[:, :, None] * block + torch.arange(block, device=t.device)).flatten(1)
    safe = columns.clamp(max=vocab - 1)
    values = t.gather(1, safe) if rows is None else t[rows[:, None], safe]
    if vocab % block:
        values.masked_fill_(columns >= vocab, fill)
    return values, columns


def first_argmax(x: torch.Tensor, maxima: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """argmax of x[rows] with ties going to the lowest id, reading only the first block that holds the maximum."""
    row_max = maxima.amax(dim=-1, keepdim=True)
    block = (maxima == row_max).to(torch.uint8).argmax(dim=-1)
    values, columns = _gather_blocks(x, block[:, None], _MAX_BLOCK, -math.inf, rows)
    within = (values == row_max).to(torch.uint8).argmax(dim=-1)
    return columns.gather(1, within[:, None]).squeeze(1)


# ---------------------------------------------------------------------------
# Drawing.


def draw_full(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw over the whole vocabulary, two levels deep.

    Block sums choose the block holding the target mass, then a cumulative sum
    over that block alone chooses the token: one pass over the vocabulary.
    """
    sums = _block_sums(weights)
    cumulative = sums.double().cumsum(dim=-1)
    target = uniforms * cumulative[:, -1]
    block = _first_above(cumulative, target)
    start = torch.where(block > 0, cumulative.gather(1, (block - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
    block_mass = sums.gather(1, block[:, None]).squeeze(1).double()
    # The mass still to cover, as a fraction of the chosen block: the in-block
    # sums are recomputed in float64, so a fraction carries over cleanly.
    within = ((target - start) / block_mass).clamp(0.0, 1.0 - 2.0**-53)
    block_weights, columns = _gather_blocks(weights, block[:, None], _SUM_BLOCK, 0.0)
    return columns.gather(1, _inverse_cdf(block_weights, within)[:, None]).squeeze(1)


def _inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Column index per row where the running sum of `weights` first exceeds uniforms * row total.

    Accumulates in float64, sequentially, so padding a row with zeros changes
    nothing. A zero-weight column is never returned: uniforms < 1 keeps the
    target below the row total, and searching for the first sum strictly above
    it skips columns that add nothing.
    """
    cumulative = weights.double().cumsum(dim=-1)
    return _first_above(cumulative, uniforms * cumulative[:, -1])


def _first_above(cumulative: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.searchsorted(cumulative, target[:, None], right=True).squeeze(1)


def draw_truncated(
    weights: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    uniforms: torch.Tensor,
) -> torch.Tensor:
    """Draw for rows under top_k and/or top_p (min_p applies too) without sorting the vocabulary when avoidable.

    top_k [m] holds V for "off". Each row's support is every token whose weight
    reaches its threshold, so tokens tied at the cut are all kept. Candidates
    are the largest weights within the blocks with the largest maxima; a row
    whose support might reach past them is retried with more, ending in a full
    sort of the row.
    """
    m, vocab = weights.shape
    device = weights.device
    maxima = block_maxima(weights)
    has_k = top_k < vocab
    nucleus_only = ~has_k & (top_p < 1.0)
    totals = torch.full((m,), math.nan, dtype=torch.float64, device=device)
    if bool(nucleus_only.any()):
        totals = _block_sums(weights).double().cumsum(dim=-1)[:, -1]

    # One spare candidate past top_k shows whether ties continue beyond the cut.
    most_k = int(torch.where(has_k, top_k + 1, 0).max())
    width = max(most_k, _FIRST_NUCLEUS if bool(nucleus_only.any()) else 1)
    tokens = torch.empty(m, dtype=torch.long, device=device)
    pending = torch.arange(m, device=device)
    while pending.numel():
        values, ids, complete = _candidates(weights, maxima, pending, width)
        cumulative = values.double().cumsum(dim=-1)
        k, p = top_k[pending], top_p[pending]
        threshold = _thresholds(values, cumulative, k, p, min_p[pending], totals[pending])
        # Nothing left out of the candidates outweighs the last of them.
        done = complete | (values[:, -1] < threshold)
        if bool(done.any()):
            tokens[pending[done]] = _draw_candidates(values[done], ids[done], threshold[done], uniforms[pending[done]])
        not_done = ~done
        if bool(not_done.any()):
            width = max(
                width * _NUCLEUS_GROWTH,
                _nucleus_size_bound(values, cumulative, p, totals[pending], not_done, vocab),
            )
        pending = pending[not_done]
    return tokens


def _nucleus_size_bound(
    values: torch.Tensor,
    cumulative: torch.Tensor,
    top_p: torch.Tensor,
    totals: torch.Tensor,
    rows: torch.Tensor,
    vocab: int,
) -> int:
    """At least how many candidates the unsettled top_p rows need: those fetched plus the mass still missing
    over the largest weight left out. Lets a very flat row go straight to a full sort."""
    missing = top_p[rows] * totals[rows] - cumulative[rows, -1]
    largest_left = values[rows, -1].double().clamp(min=_SMALLEST_WEIGHT)
    extra = torch.nan_to_num(missing / largest_left, nan=0.0).clamp(0.0, float(vocab))
    return int(values.shape[1] + float(extra.max()))


def _candidates(
    weights: torch.Tensor, maxima: torch.Tensor, pending: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The `width` largest weights of rows `pending`, high to low, with their ids; and whether that is all of them.

    They are searched for only in the blocks with the largest maxima, at least
    `width` of them: those blocks hold `width` weights no smaller than any
    weight elsewhere, so the values found are exactly the row's top `width`.
    """
    rows = weights if pending.numel() == weights.shape[0] else weights.index_select(0, pending)
    blocks = max(_FEWEST_BLOCKS, width)
    if blocks >= maxima.shape[1]:
        pool, pool_ids = rows, None
    else:
        chosen = maxima[pending].topk(blocks, dim=-1).indices
        pool, pool_ids = _gather_blocks(rows, chosen, _MAX_BLOCK, 0.0)
    # Only a whole row can be narrower than `width`: a pool of blocks has _MAX_BLOCK entries per block.
    complete = width >= pool.shape[1]
    values, picks = pool.sort(dim=-1, descending=True) if complete else pool.topk(width, dim=-1)
    ids = picks if pool_ids is None else pool_ids.gather(1, picks)
    return values, ids, complete


def _thresholds(
    values: torch.Tensor,
    cumulative: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    totals: torch.Tensor,
) -> torch.Tensor:
    """Smallest weight kept per row given candidates `values` [m, K] sorted high to low.

    top_p measures the nucleus against the mass left after top_k (the whole
    row's mass when top_k is off), so the two compose like successive filters.
    """
    width = values.shape[1]
    before = torch.cat((torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]), dim=1)
    k = top_k.clamp(max=width)
    mass = torch.where(top_k < width, cumulative.gather(1, (k - 1)[:, None]).squeeze(1), totals)
    nucleus = (before < (top_p * mass)[:, None]).sum(dim=-1)
    count = torch.where(top_p < 1.0, torch.minimum(nucleus, k), k)
    kept = values.gather(1, (count - 1)[:, None]).squeeze(1)
    return torch.maximum(kept, min_p).clamp(min=_SMALLEST_WEIGHT)


def _draw_candidates(
    values: torch.Tensor, ids: torch.Tensor, threshold: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    """Inverse-CDF draw over the candidates at or above each row's threshold, taken in token-id order.

    Ordering by id makes the draw independent of how ties were ordered and of
    how many candidates were fetched, both of which depend on the batch.
    """
    past_every_id = torch.iinfo(torch.long).max
    kept = values >= threshold[:, None]
    # Candidates come sorted high to low, so each row's kept set is a prefix.
    width = int(kept.sum(dim=-1).max())
    kept, values, ids = kept[:, :width], values[:, :width], ids[:, :width]
    sorted_ids, order = torch.where(kept, ids, past_every_id).sort(dim=-1)
    weights = torch.where(kept, values, 0.0).gather(1, order)
    return sorted_ids.gather(1, _inverse_cdf(weights, uniforms)[:, None]).squeeze(1)


# ---------------------------------------------------------------------------
# Top entries.


def top_entries(t: torch.Tensor, maxima: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries per row of t, high to low, given block maxima of an order-preserving image of t.

    The k blocks with the largest maxima hold k entries at least as large as
    anything outside them, so the top k can be found among those blocks alone.
    """
    if k >= maxima.shape[1]:
        return t.topk(k, dim=-1)
    chosen = maxima.topk(k, dim=-1).indices
    pool, pool_ids = _gather_blocks(t, chosen, _MAX_BLOCK, -math.inf)
    values, picks = pool.topk(k, dim=-1)
    return values, pool_ids.gather(1, picks)
