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
and each verified row is computed as a lone decode row is (`runner.py`), so
every kept token is the one plain decoding would have produced.

When it pays (the guard, per request, `draft_length`): verifying d drafts
costs `StepCosts.ratio(1 + d, B)` times the request's share of a plain step
of the B requests decoding (measured on this engine's own steps) and yields
1 + p + ... + p^d tokens, where p is the
request's recent chance that a draft token holds given the ones before it
did. The request verifies the d that yields most tokens per unit of cost,
and only while that beats plain decoding; having stopped, it starts again
only once the gain clears a margin (hysteresis). While it does not
speculate its drafts are still proposed and checked against the tokens
plain decoding then produces (shadow drafts, free), so the estimate follows
the output into and out of copying without paying for a probe.

Drafts from a draft model (`--draft-model`, `draft_model.py`) cost a
forward pass of it per token, so none are made in the shadow: a request
that stopped verifies one probe after `FIRST_BACKOFF` plain steps, then
after twice as many each time the probe does not restart it (at most
`MAX_BACKOFF`).

Engine-wide, nothing is proposed while more than `max_batch` requests run:
a wide batch is no longer bound by reading the weights, so verifying drafts
costs about as much as the tokens it saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from inferd.engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from inferd.engine.draft_model import DraftModel

METHODS = ("off", "ngram", "auto")
# Before an engine has timed its own steps: what one more verified row adds to a
# one-row step. Measured on the bundled model (GGUF blocks, 2-core AVX-512
# VNNI/BF16 CPU): see BENCHMARKS.md, "Speculative decoding".
PRIOR_ROW_COST = 0.12
COST_SMOOTHING = 0.1  # weight of a new step's time in the running averages
# A new request's draft acceptance before any evidence: two positions, one held.
PRIOR_TRIED, PRIOR_HELD = 2.0, 1.0
EVIDENCE_DECAY = 0.8  # weight left to older drafts at each new outcome: recent output decides
START_GAIN = 1.1  # tokens per unit of cost needed to start speculating again once stopped
FIRST_BACKOFF, MAX_BACKOFF = 8, 128  # plain steps before a draft model's probe, doubling per failed probe


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


class StepCosts:
    """What verifying drafts costs a request, in units of its share of a plain step
    of the same requests (a plain step's seconds over its requests, B): d drafts cost
    `ratio(1 + d, B)` = 1 + d x row_cost(B), a verified row's extra seconds over that
    share. Learned for each B from this engine's own decode steps of B requests
    that may speculate, plain and verifying ones in whatever order they come;
    until both kinds are seen, B x `PRIOR_ROW_COST` (a few requests' plain step
    costs about what one request's does). `measure=False` keeps the given row
    cost for every B (tests; a caller that measured it already)."""

    def __init__(self, row_cost: float = PRIOR_ROW_COST, measure: bool = True):
        self.prior = row_cost
        self.measure = measure
        self.batches: dict[int, BatchCosts] = {}  # by the step's requests

    def observe(self, rows: int, seconds: float, requests: int = 1) -> None:
        """A decode step of `requests` requests computed `rows` rows (one each, plus their drafts)."""
        if self.measure:
            self.batches.setdefault(requests, BatchCosts()).observe(rows - requests, seconds)

    def row_cost(self, requests: int = 1) -> float:
        learned = self.batches[requests].row_cost(requests) if requests in self.batches else None
        if learned is not None:
            return learned
        return self.prior * (requests if self.measure else 1)

    def ratio(self, rows: int, requests: int = 1) -> float:
        return 1.0 + self.row_cost(requests) * (rows - 1)


@dataclass
class BatchCosts:
    """Running averages of one batch size's plain and verifying steps."""

    plain_seconds: float | None = None
    verify_seconds: float | None = None
    verify_rows: float | None = None  # a verifying step's verified rows (its drafts), on average

    def observe(self, drafts: int, seconds: float) -> None:
        if drafts == 0:
            self.plain_seconds = _average(self.plain_seconds, seconds)
        else:
            self.verify_seconds = _average(self.verify_seconds, seconds)
            self.verify_rows = _average(self.verify_rows, drafts)

    def row_cost(self, requests: int) -> float | None:
        if not self.plain_seconds or self.verify_seconds is None:
            return None
        extra = max(0.0, self.verify_seconds - self.plain_seconds) / self.verify_rows
        return extra / (self.plain_seconds / requests)


def _average(mean: float | None, value: float) -> float:
    return value if mean is None else mean + COST_SMOOTHING * (value - mean)


def expected_tokens(held: float, drafts: int) -> float:
    """Tokens one verification of `drafts` yields when each draft holds with
    chance `held` given the ones before it did: 1 + held + ... + held^drafts."""
    return float(sum(held**i for i in range(drafts + 1)))


@dataclass
class DraftRecord:
    """One request's recent evidence about its drafts, and whether it speculates."""

    tried: float = PRIOR_TRIED  # draft positions checked (decayed), up to and including a failed one
    held: float = PRIOR_HELD  # of those, the ones that held
    speculating: bool = True
    shadow: list[int] = field(default_factory=list)  # drafts proposed, not verified, checked against the output
    shadow_at: int = 0  # the request's token count when the shadow was proposed
    plain_steps: int = 0  # since it stopped, or since its last probe (draft model)
    backoff: int = FIRST_BACKOFF

    @property
    def hold_rate(self) -> float:
        return self.held / self.tried

    def add(self, drafts: int, held: int) -> None:
        self.tried = self.tried * EVIDENCE_DECAY + held + (held < drafts)
        self.held = self.held * EVIDENCE_DECAY + held


class Speculator:
    """Sets each eligible running request's `draft_token_ids` before a step and
    keeps the per-request evidence for the guard.

    `method`: off, ngram, or auto (ngram where `exact`: the model computes a
    verified row bit for bit as a lone decode row, so output is unchanged;
    off elsewhere)."""

    def __init__(self, method: str, num_tokens: int, max_batch: int, max_model_len: int, exact: bool = True,
                 costs: StepCosts | None = None, drafter: DraftModel | None = None):
        if method not in METHODS:
            raise ValueError(f"--speculative must be one of {', '.join(METHODS)}, got {method!r}")
        if num_tokens < 1:
            raise ValueError(f"--spec-tokens must be at least 1, got {num_tokens}")
        self.enabled = method == "ngram" or (method == "auto" and exact)
        self.num_tokens = num_tokens
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self.costs = costs or StepCosts()
        self.drafter = drafter
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
            room = self.max_model_len - req.num_tokens - 1
            if req.params.max_tokens is not None:  # the token after the drafts counts too
                room = min(room, req.params.max_tokens - len(req.output_token_ids) - 1)
            record = self.records.setdefault(req.request_id, DraftRecord())
            self._check_shadow(req, record)
            if room < 1:
                continue
            if self.drafter is not None:
                req.draft_token_ids = self._from_draft_model(req, record, min(self.num_tokens, room), len(running))
                continue
            proposal = propose_ngram(req.all_token_ids, min(self.num_tokens, room))
            drafts = self.draft_length(record, len(proposal), len(running))
            if drafts:
                req.draft_token_ids = proposal[:drafts]
            elif proposal and not record.shadow:
                record.shadow, record.shadow_at = proposal, req.num_tokens

    def _from_draft_model(self, req: Request, record: DraftRecord, most: int, requests: int) -> list[int]:
        drafts = self.draft_length(record, most, requests)
        if drafts:
            record.backoff, record.plain_steps = FIRST_BACKOFF, 0
        else:
            record.plain_steps += 1
            if record.plain_steps < record.backoff:
                return []
            drafts = most  # a probe: the most the request may verify, the most evidence
            record.backoff, record.plain_steps = min(2 * record.backoff, MAX_BACKOFF), 0
        return self.drafter.propose(req, drafts)

    def draft_length(self, record: DraftRecord, available: int, requests: int = 1) -> int:
        """How many of `available` drafts to verify in a step of `requests` requests: the
        count that yields most tokens per unit of its cost, or 0 where none beats a plain
        step (by `START_GAIN` when the request is not speculating now)."""
        best, best_gain = 0, 1.0
        for drafts in range(1, available + 1):
            gain = expected_tokens(record.hold_rate, drafts) / self.costs.ratio(1 + drafts, requests)
            if gain > best_gain:
                best, best_gain = drafts, gain
        if available:
            record.speculating = best > 0 and best_gain >= (1.0 if record.speculating else START_GAIN)
        return best if record.speculating else 0

    @staticmethod
    def _check_shadow(req: Request, record: DraftRecord) -> None:
        """Score a shadow draft against the tokens produced since it was
        proposed, once they show how far it would have held."""
        if not record.shadow:
            return
        since = req.num_tokens - record.shadow_at
        produced = req.output_token_ids[len(req.output_token_ids) - since :] if since else []
        held = 0
        while held < min(since, len(record.shadow)) and produced[held] == record.shadow[held]:
            held += 1
        if held < since or held == len(record.shadow):  # a miss seen, or every draft held
            record.add(len(record.shadow), held)
            record.shadow = []

    def observe_step(self, requests: int, rows: int, seconds: float) -> None:
        """A step that computed `requests` requests' decodes, `rows` rows in all (one
        each, plus their drafts), took `seconds`: the cost model learns from it."""
        if self.enabled:
            self.costs.observe(rows, seconds, requests)

    def record(self, req: Request, drafted: int, accepted: int) -> None:
        self.drafted_total += drafted
        self.accepted_total += accepted
        if req.status is not RequestStatus.RUNNING:
            return  # finished: already forgotten
        self.records.setdefault(req.request_id, DraftRecord()).add(drafted, accepted)

    def forget(self, request_id: str) -> None:
        self.records.pop(request_id, None)
