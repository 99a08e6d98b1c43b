"""Batched next-token sampling: the engine's one call from a step's logits
to its tokens.

One call turns logits [N, V] into one token per sequence. Per row the order is:
1. steering: a forced token (the thinking budget's </think>) leaves only that
   token; otherwise the grammar, if any, masks the tokens it disallows;
2. logit_bias;
3. repetition penalty, then frequency and presence penalties;
4. min_tokens: EOS and stop tokens masked until enough tokens are out;
5. argmax (greedy), or temperature -> top_k -> top_p -> min_p -> draw.
Logprobs are the log-softmax after stage 4, or with post_sampling_probs of the
truncated distribution of stage 5 (post_sampling.py). Stages 1-4 are logits_processing.

Draws are inverse-CDF with one uniform per row, taken in token-id order. A
seeded row takes its uniform from its own generator, and everything it is
compared against depends only on that row's logits, so a seed yields the same
token whatever the rest of the batch holds and wherever the row sits.

This module holds the public types and the Sampler, which sorts rows by what
they ask for and hands each group to the tensor work: logits_processing does
the request-driven adjustments, vocab_blocks the argmax, draws and top entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from inferd.engine.outputs import TokenLogprobs
from inferd.engine.sampling.errors import NoValidTokenError, SamplerError
from inferd.engine.sampling.logits_processing import adjusts_logits, process_logits
from inferd.engine.sampling.post_sampling import post_sampling_logprobs
from inferd.engine.sampling.vocab_blocks import block_maxima, draw_full, draw_truncated, first_argmax, top_entries
from inferd.engine.sampling_params import SamplingParams
from inferd.kernels import greedy_rows

if TYPE_CHECKING:
    from inferd.engine.sampling.grammar_mask import GrammarConstraint


@dataclass
class SampleRow:
    """One sequence's view for one decode step."""

    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]  # generated so far: penalties and min_tokens
    generator: torch.Generator | None  # from make_generator(params.seed); None = global RNG
    eos_token_ids: frozenset[int]  # masked, with stop_token_ids, until min_tokens is reached
    forced_token: int | None = None  # the only token allowed this step (a spent thinking budget)
    grammar: GrammarConstraint | None = None  # masks the tokens it disallows


def argmax_is_enough(row: SampleRow) -> bool:
    """The row's token is the first argmax of the model's logits as they are: a greedy
    row that asks for no logprobs and whose logits no stage adjusts. A step of such
    rows alone can take its tokens from the LM head without writing the logits."""
    return row.params.greedy and row.params.logprobs is None and not adjusts_logits(row)


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprobs | None]


def make_generator(seed: int | None) -> torch.Generator | None:
    """A CPU generator for a seeded request; None leaves the row on the global RNG.

    Any Python int is accepted: it is folded into the generator's 64-bit seed range.
    """
    if seed is None:
        return None
    generator = torch.Generator()
    generator.manual_seed(seed % (1 << 64))
    return generator


class Sampler:
    """Picks next tokens for a batch. Keeps [N, V] scratch buffers between calls, so use one per engine loop."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def __call__(self, logits: torch.Tensor, rows: Sequence[SampleRow]) -> SamplerOutput:
        """Pick one token per row of `logits` [N, V] (any float dtype; computed in float32).

        Logprobs, when a row asks for them, are the log-softmax of the processed
        logits (after steering, logit_bias, penalties and min_tokens masking),
        i.e. before temperature and top_k/top_p/min_p truncation: the model's
        distribution as adjusted by the request, not the narrowed one the token
        was drawn from.
        """
        if logits.dim() != 2:
            raise SamplerError(f"logits must be 2-D [rows, vocab], got shape {tuple(logits.shape)}")
        if logits.shape[0] != len(rows):
            raise SamplerError(f"got {len(rows)} sample rows for {logits.shape[0]} rows of logits")
        if not rows:
            return SamplerOutput(token_ids=[], logprobs=[])

        n, vocab = logits.shape
        x = process_logits(logits, rows, out=self._buffer("logits", n, vocab, logits.device))
        if all(row.params.greedy and row.params.logprobs is None for row in rows) and greedy_rows.supports(x):
            token_ids = greedy_rows.first_argmax(x)  # one call; -1 where the row has no finite maximum
            if min(token_ids) < 0:
                raise NoValidTokenError([i for i, token in enumerate(token_ids) if token < 0])
            return SamplerOutput(token_ids=token_ids, logprobs=[None] * n)
        maxima = block_maxima(x)
        row_max = maxima.amax(dim=-1)
        if not bool(torch.isfinite(row_max).all()):
            raise NoValidTokenError((~torch.isfinite(row_max)).nonzero().flatten().tolist())

        tokens = torch.empty(n, dtype=torch.long, device=x.device)
        greedy = [i for i, row in enumerate(rows) if row.params.greedy]
        if greedy:
            index = _index(greedy, x.device)
            tokens[index] = first_argmax(x, maxima[index], index)
        sampled = [i for i, row in enumerate(rows) if not row.params.greedy]
        if sampled:
            self._sample(x, row_max, rows, sampled, tokens)
        token_ids = tokens.tolist()
        logprobs = _logprobs(x, maxima, rows, tokens)
        for i, row in enumerate(rows):
            if row.params.post_sampling_probs and row.params.logprobs is not None:
                logprobs[i] = post_sampling_logprobs(x[i], row.params, token_ids[i])
        return SamplerOutput(token_ids=token_ids, logprobs=logprobs)

    def _buffer(self, name: str, n: int, vocab: int, device: torch.device) -> torch.Tensor:
        """A float32 [n, vocab] scratch tensor, reused across calls: fresh ones cost page faults each step."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < n * vocab or buffer.device != device:
            buffer = torch.empty(n * vocab, dtype=torch.float32, device=device)
            self._buffers[name] = buffer
        return buffer[: n * vocab].view(n, vocab)

    def _sample(
        self, x: torch.Tensor, row_max: torch.Tensor, rows: Sequence[SampleRow], positions: list[int], tokens: torch.Tensor
    ) -> None:
        """Draw tokens[positions] from processed logits x; none of those rows is greedy."""
        vocab = x.shape[1]
        device = x.device
        top_k = {i: rows[i].params.top_k if 0 < rows[i].params.top_k < vocab else vocab for i in positions}
        truncated = [i for i in positions if top_k[i] < vocab or rows[i].params.top_p < 1.0]
        truncated_set = set(truncated)
        plain = [i for i in positions if i not in truncated_set]
        # Plain rows first, truncated rows after, so each group is a slice of the weights.
        order = plain + truncated
        params = [rows[i].params for i in order]
        index = _index(order, device)

        # Weights exp((x - max) / T): the row maximum maps to exactly 1, so no
        # temperature overflows and min_p compares straight against the weights.
        weights = self._buffer("weights", len(order), vocab, device)
        if order == list(range(x.shape[0])):
            torch.sub(x, row_max[:, None], out=weights)
        else:
            torch.index_select(x, 0, index, out=weights)
            weights.sub_(row_max[index][:, None])
        temperatures = [p.temperature for p in params]
        if any(t != 1.0 for t in temperatures):
            weights.div_(torch.tensor(temperatures, dtype=torch.float32, device=device)[:, None])
        weights.exp_()
        uniforms = _uniforms([rows[i] for i in order]).to(device)

        drawn = torch.empty(len(order), dtype=torch.long, device=device)
        split = len(plain)
        if plain:
            plain_weights = weights[:split]
            for j, p in enumerate(params[:split]):
                if p.min_p > 0.0:
                    # threshold_ keeps values strictly above its bound: pass the float32 just below min_p.
                    torch.nn.functional.threshold_(plain_weights[j], _float32_below(p.min_p), 0.0)
            drawn[:split] = draw_full(plain_weights, uniforms[:split])
        if truncated:
            drawn[split:] = draw_truncated(
                weights[split:],
                top_k=torch.tensor([top_k[i] for i in truncated], device=device),
                top_p=torch.tensor([p.top_p for p in params[split:]], dtype=torch.float64, device=device),
                min_p=torch.tensor([p.min_p for p in params[split:]], dtype=torch.float32, device=device),
                uniforms=uniforms[split:],
            )
        tokens[index] = drawn


# ---------------------------------------------------------------------------
# Drawing inputs.


def _uniforms(rows: list[SampleRow]) -> torch.Tensor:
    """One U[0, 1) per row, float64 on CPU: seeded rows from their own generator, the rest in one global draw."""
    uniforms = torch.empty(len(rows), dtype=torch.float64)
    unseeded = [i for i, row in enumerate(rows) if row.generator is None]
    if unseeded:
        uniforms[unseeded] = torch.rand(len(unseeded), dtype=torch.float64)
    for i, row in enumerate(rows):
        if row.generator is not None:
            uniforms[i] = torch.rand(1, dtype=torch.float64, generator=row.generator)[0]
    return uniforms


def _float32_below(value: float) -> float:
    below = torch.nextafter(torch.tensor(value, dtype=torch.float32), torch.tensor(-math.inf))
    return float(below)


# ---------------------------------------------------------------------------
# Logprobs.


def _logprobs(
    x: torch.Tensor, maxima: torch.Tensor, rows: Sequence[SampleRow], tokens: torch.Tensor
) -> list[TokenLogprobs | None]:
    wanted = [i for i, row in enumerate(rows) if row.params.logprobs is not None]
    result: list[TokenLogprobs | None] = [None] * len(rows)
    if not wanted:
        return result
    index = _index(wanted, x.device)
    log_probs = torch.log_softmax(_select_rows(x, wanted), dim=-1)
    chosen_ids = tokens[index]
    chosen = log_probs.gather(1, chosen_ids[:, None]).squeeze(1).tolist()
    most = min(max(rows[i].params.logprobs for i in wanted), x.shape[1])
    top_values: list[list[float]] = [[] for _ in wanted]
    top_ids: list[list[int]] = [[] for _ in wanted]
    if most:
        values, ids = top_entries(log_probs, maxima[index], most)
        top_values, top_ids = values.tolist(), ids.tolist()
    for j, (i, token_id) in enumerate(zip(wanted, chosen_ids.tolist())):
        k = rows[i].params.logprobs
        result[i] = TokenLogprobs(token_id=token_id, logprob=chosen[j], top=list(zip(top_ids[j][:k], top_values[j][:k])))
    return result


# ---------------------------------------------------------------------------
# Row selection helpers.


def _index(positions: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(positions, dtype=torch.long, device=device)


def _select_rows(x: torch.Tensor, positions: list[int]) -> torch.Tensor:
    """Rows `positions` of x; x itself when that is every row (no copy)."""
    if len(positions) == x.shape[0]:
        return x
    return x.index_select(0, _index(positions, x.device))
