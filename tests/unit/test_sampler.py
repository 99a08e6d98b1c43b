import math
import random

import pytest
import torch

from inferd.engine.outputs import TokenLogprobs
from inferd.engine.sampling import vocab_blocks
from inferd.engine.sampling.errors import NoValidTokenError, SamplerError
from inferd.engine.sampling.logits_processing import process_logits
from inferd.engine.sampling.sampler import Sampler, SampleRow, make_generator
from inferd.engine.sampling_params import SamplingParams

from hypothesis import given, settings
from hypothesis import strategies as st

sample = Sampler()


def make_row(params=None, *, prompt=(), output=(), seed=None, eos=(), forced_token=None, grammar=None, **fields):
    params = params if params is not None else SamplingParams(**fields)
    return SampleRow(
        params=params,
        prompt_token_ids=list(prompt),
        output_token_ids=list(output),
        generator=make_generator(seed),
        eos_token_ids=frozenset(eos),
        forced_token=forced_token,
        grammar=grammar,
    )


def drawn_support(logits_row, draws=400, **fields):
    """Every token drawn by `draws` seeded copies of one row, sampled in a single batch."""
    logits = logits_row[None].expand(draws, -1)
    rows = [make_row(seed=seed, **fields) for seed in range(draws)]
    return set(sample(logits, rows).token_ids)


def logits_from_probs(probs, placement):
    """Logits of a vocabulary where token placement[r] has probability probs[r]."""
    logits = torch.full((len(placement),), -math.inf)
    logits[list(placement)] = torch.tensor(probs).log()
    return logits


# Probabilities by rank, scattered over ids so that rank and id differ.
RANKED = [0.5, 0.25, 0.15, 0.06, 0.04]
PLACEMENT = [3, 0, 4, 1, 2]


def ranks(*rank_list):
    return {PLACEMENT[r] for r in rank_list}


# --- greedy and temperature ---------------------------------------------------


def test_greedy_rows_take_argmax_of_logits():
    logits = torch.randn(6, 100, generator=torch.Generator().manual_seed(0))
    out = sample(logits, [make_row(temperature=0.0) for _ in range(6)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()
    assert out.logprobs == [None] * 6


def test_greedy_argmax_across_blocks_and_a_partial_last_block():
    gen = torch.Generator().manual_seed(10)
    logits = torch.randn(5, 1500, generator=gen)
    logits[1, 1499] = 10.0  # in the partial last block
    logits[2, [700, 900, 1400]] = 10.0  # ties in different blocks
    logits[3, [600, 601]] = 10.0  # ties inside one block
    out = sample(logits, [make_row(temperature=0.0) for _ in range(5)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()
    assert out.token_ids[1:4] == [1499, 700, 600]


def test_greedy_breaks_ties_toward_lowest_id():
    logits = torch.zeros(10)
    logits[[3, 7]] = 5.0
    assert drawn_support(logits, draws=50, temperature=0.0) == {3}


def test_tiny_temperature_draws_only_among_tied_maxima():
    logits = torch.zeros(10)
    logits[[3, 7]] = 5.0
    logits[5] = 4.99
    assert drawn_support(logits, draws=200, temperature=1e-4) == {3, 7}


def test_tiny_temperature_on_huge_logits_stays_finite_and_takes_argmax():
    logits = torch.linspace(-3e4, 3e4, 64).flip(0)
    logits[40] = 3.5e4
    assert drawn_support(logits, draws=50, temperature=1e-5) == {40}


def test_temperature_below_float32_range_is_greedy():
    logits = torch.zeros(10)
    logits[[3, 7]] = 5.0
    assert drawn_support(logits, draws=20, temperature=1e-300) == {3}


def test_top_k_one_matches_greedy():
    logits = torch.randn(32, 500, generator=torch.Generator().manual_seed(1))
    out = sample(logits, [make_row(top_k=1) for _ in range(32)])
    assert out.token_ids == logits.argmax(dim=-1).tolist()


def test_bfloat16_logits_sample_like_their_float32_values():
    logits = torch.randn(8, 300, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)

    def rows():
        return [make_row(seed=i, top_p=0.9) for i in range(8)]

    assert sample(logits, rows()).token_ids == sample(logits.float(), rows()).token_ids


# --- truncation ----------------------------------------------------------------


def test_top_k_support_is_exactly_the_k_most_likely():
    logits = logits_from_probs(RANKED, PLACEMENT)
    assert drawn_support(logits, top_k=3) == ranks(0, 1, 2)


def test_top_k_keeps_every_token_tied_at_the_cut():
    logits = torch.tensor([3.0, 2.0, 2.0, 1.0, 0.0])
    assert drawn_support(logits, top_k=2) == {0, 1, 2}


@pytest.mark.parametrize(
    ("top_p", "kept_ranks"),
    [(0.45, {0}), (0.7, {0, 1}), (0.8, {0, 1, 2}), (0.93, {0, 1, 2, 3}), (0.99, {0, 1, 2, 3, 4})],
)
def test_top_p_keeps_exactly_the_smallest_nucleus(top_p, kept_ranks):
    # Mass before each rank: 0, 0.5, 0.75, 0.9, 0.96.
    logits = logits_from_probs(RANKED, PLACEMENT)
    assert drawn_support(logits, top_p=top_p) == ranks(*kept_ranks)


def test_top_p_applies_to_the_temperature_scaled_distribution():
    # At T=2 the probabilities become ~0.347, 0.245, 0.190, 0.120, 0.098: mass before rank 2 is ~0.592.
    logits = logits_from_probs(RANKED, PLACEMENT)
    assert drawn_support(logits, top_p=0.7) == ranks(0, 1)
    assert drawn_support(logits, top_p=0.7, temperature=2.0) == ranks(0, 1, 2)


def test_top_p_measures_the_nucleus_within_the_top_k_mass():
    # After top_k=2 the kept probabilities renormalise to 0.571 and 0.429, so top_p=0.55 keeps one.
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    assert drawn_support(logits, top_k=2, top_p=0.55) == {0}
    assert drawn_support(logits, top_k=3, top_p=0.55) == {0, 1}


@pytest.mark.parametrize(("min_p", "kept"), [(0.5, {0}), (0.35, {0, 1}), (0.3, {0, 1, 2}), (0.1, {0, 1, 2, 3})])
def test_min_p_keeps_tokens_at_least_min_p_times_the_top_probability(min_p, kept):
    # Probability relative to the top one: 1, 0.4, 0.32, 0.2, 0.08.
    logits = torch.tensor([0.5, 0.2, 0.16, 0.1, 0.04]).log()
    assert drawn_support(logits, min_p=min_p) == kept


def test_min_p_composes_with_top_p():
    logits = torch.tensor([0.5, 0.2, 0.16, 0.1, 0.04]).log()
    assert drawn_support(logits, min_p=0.35, top_p=0.99) == {0, 1}
    assert drawn_support(logits, min_p=0.05, top_p=0.8) == {0, 1, 2}


def test_nucleus_larger_than_the_first_candidate_fetch_is_still_exact():
    # 2000 equal tokens hold 90% of the mass, 1000 more hold 10%, the rest are banned.
    logits = torch.full((5000,), -math.inf)
    logits[:2000] = 0.0
    logits[2000:3000] = math.log(2 / 9)
    inside = drawn_support(logits, draws=300, top_p=0.85)
    assert inside <= set(range(2000)) and len(inside) > 250
    wider = drawn_support(logits, draws=300, top_p=0.95)
    assert wider & set(range(2000, 3000))
    assert wider <= set(range(3000))


def test_nucleus_spread_over_more_blocks_than_first_searched():
    # One likely token in each of more blocks than the first search covers (the
    # last in a partial block); the rest of the vocabulary is unlikely.
    block, searched = vocab_blocks._MAX_BLOCK, vocab_blocks._FEWEST_BLOCKS
    vocab = (searched + 64) * block + 10
    hot_blocks = searched + 40
    hot = [b * block + 7 for b in range(hot_blocks - 1)] + [vocab - 1]
    logits = torch.zeros(vocab)
    logits[hot] = 12.0 + 0.001 * torch.arange(float(hot_blocks))
    ranked = torch.tensor(hot)[logits[hot].argsort(descending=True)].tolist()
    probs = torch.softmax(logits.double(), dim=-1)[ranked]
    before = probs.cumsum(0) - probs
    cut = searched + 14
    top_p = float(before[cut - 1] + before[cut]) / 2

    drawn = drawn_support(logits, draws=600, top_p=top_p)
    assert drawn <= set(ranked[:cut])
    assert drawn & set(ranked[searched:cut])
    # min_p alone decides this support: every likely token, whichever block it is in.
    drawn = drawn_support(logits, draws=600, top_p=0.9999, min_p=0.5)
    assert drawn <= set(hot)
    assert drawn & set(ranked[searched:])


def test_top_k_at_low_temperature_ignores_underflowed_weights():
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(5000, generator=gen) * 5
    top = set(logits.topk(50).indices.tolist())
    drawn = drawn_support(logits, draws=100, top_k=50, temperature=0.02)
    assert drawn <= top and len(drawn) >= 1


# --- draw distribution -----------------------------------------------------------


def test_full_vocabulary_draws_follow_the_probabilities():
    # 1500 tokens span two whole blocks and a partial one; mass sits in each of them.
    logits = torch.full((1500,), -math.inf)
    expected = {10: 0.1, 600: 0.2, 1030: 0.4, 1499: 0.3}
    for token, prob in expected.items():
        logits[token] = math.log(prob)
    draws = 4000
    torch.manual_seed(3)
    tokens = sample(logits[None].expand(draws, -1), [make_row() for _ in range(draws)]).token_ids
    assert set(tokens) == set(expected)
    for token, prob in expected.items():
        assert tokens.count(token) / draws == pytest.approx(prob, abs=0.025)


def test_truncated_draws_follow_the_renormalised_probabilities():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    draws = 4000
    torch.manual_seed(4)
    tokens = sample(logits[None].expand(draws, -1), [make_row(top_k=2) for _ in range(draws)]).token_ids
    assert set(tokens) == {0, 1}
    assert tokens.count(0) / draws == pytest.approx(4 / 7, abs=0.025)


# --- logit bias, penalties, min_tokens ------------------------------------------


def test_negative_infinite_bias_bans_a_token():
    logits = torch.tensor([0.0, 3.0, 2.9, 0.5])
    assert drawn_support(logits, draws=50, temperature=0.0, logit_bias={1: -math.inf}) == {2}
    assert 1 not in drawn_support(logits, draws=300, logit_bias={1: -math.inf})


def test_large_positive_bias_forces_a_token():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0])
    assert drawn_support(logits, draws=50, temperature=0.0, logit_bias={3: 100.0}) == {3}
    assert drawn_support(logits, draws=300, logit_bias={3: 100.0}) == {3}


def test_penalties_give_the_hand_computed_logits():
    logits = torch.tensor(
        [
            [2.0, -1.0, 0.5, -0.5, 1.0, 0.0],
            [2.0, -1.0, 0.5, -0.5, 1.0, 0.0],
            [2.0, -1.0, 0.5, -0.5, 1.0, 0.0],
        ]
    )
    before = logits.clone()
    rows = [
        make_row(
            prompt=[0, 1],
            output=[2, 2, 3],
            repetition_penalty=2.0,
            presence_penalty=0.5,
            frequency_penalty=0.25,
        ),
        make_row(prompt=[0, 1], output=[2, 2, 3]),
        make_row(prompt=[0], output=[5], logit_bias={4: -1.5}, presence_penalty=-1.0),
    ]
    processed = process_logits(logits, rows)
    # Row 0: repetition on {0, 1, 2, 3} (divide positives, multiply negatives), then
    # token 2: 0.25 - 0.25 * 2 - 0.5, token 3: -1.0 - 0.25 * 1 - 0.5.
    assert processed[0].tolist() == [1.0, -2.0, -0.75, -1.75, 1.0, 0.0]
    assert processed[1].tolist() == [2.0, -1.0, 0.5, -0.5, 1.0, 0.0]
    # Row 2: bias first, then a negative presence penalty on the one output token.
    assert processed[2].tolist() == [2.0, -1.0, 0.5, -0.5, -0.5, 1.0]
    assert torch.equal(logits, before)


def test_repetition_penalty_covers_prompt_tokens_before_any_output():
    logits = torch.tensor([[4.0, -2.0, 1.0]])
    processed = process_logits(logits, [make_row(prompt=[0, 1, 1], repetition_penalty=4.0)])
    assert processed.tolist() == [[1.0, -8.0, 1.0]]


def test_processed_logits_are_written_to_the_given_buffer():
    logits = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    out = torch.empty(2, 2)
    processed = process_logits(logits, [make_row(logit_bias={0: 0.5}), make_row()], out=out)
    assert processed is out
    assert out.tolist() == [[1.5, 2.0], [3.0, 4.0]]


def test_unprocessed_float32_logits_are_returned_without_a_copy():
    logits = torch.randn(2, 8)
    assert process_logits(logits, [make_row(), make_row(temperature=0.0)]) is logits


def test_greedy_follows_the_penalised_logits():
    logits = torch.tensor([[3.0, 2.5, 0.0]])
    out = sample(logits, [make_row(temperature=0.0, prompt=[0], repetition_penalty=2.0)])
    assert out.token_ids == [1]


def test_min_tokens_masks_eos_and_stop_ids_until_reached():
    logits = torch.tensor([[0.0, 1.0, 2.0, 5.0, 4.0]] * 2)
    params = SamplingParams(temperature=0.0, min_tokens=3, stop_token_ids=[4])
    early = make_row(params, output=[1, 1], eos=[3])
    reached = make_row(params, output=[1, 1, 1], eos=[3])
    processed = process_logits(logits, [early, reached])
    assert processed[0].tolist() == [0.0, 1.0, 2.0, -math.inf, -math.inf]
    assert processed[1].tolist() == [0.0, 1.0, 2.0, 5.0, 4.0]
    assert sample(logits, [early, reached]).token_ids == [2, 3]


def test_min_tokens_masking_holds_for_sampled_rows():
    logits = torch.tensor([1.0, 1.0, 9.0, 9.0])
    assert drawn_support(logits, draws=200, min_tokens=1, eos=[2], stop_token_ids=[3]) == {0, 1}


# --- steering: a forced token, else the grammar, before everything else -------------


class AllowOnly:
    """A grammar that allows the same few tokens at every step (ids in the first 31 of the vocabulary)."""

    def __init__(self, *allowed):
        self.allowed = allowed
        self.masks_filled = 0

    def fill_mask(self, bitmask, row):
        self.masks_filled += 1
        bitmask[row] = 0
        for t in self.allowed:
            bitmask[row, 0] |= 1 << t


def test_a_forced_token_is_the_only_choice_whatever_the_bias():
    logits = torch.tensor([[0.0, 9.0, 1.0, -3.0]] * 2)
    rows = [make_row(forced_token=3, logit_bias={1: 100.0}), make_row(forced_token=3, temperature=0.0, logprobs=1)]
    processed = process_logits(logits, rows)
    assert processed[0].tolist() == [-math.inf, -math.inf, -math.inf, 0.0]
    out = sample(logits, rows)
    assert out.token_ids == [3, 3] and out.logprobs[1].logprob == 0.0


def test_the_grammar_masks_before_logit_bias_and_penalties():
    logits = torch.tensor([[0.0, 5.0, 1.0, 2.0, 7.0]])
    grammar = AllowOnly(0, 2)
    row = make_row(grammar=grammar, temperature=0.0, logit_bias={1: 100.0, 2: 0.5}, repetition_penalty=2.0, prompt=[0])
    assert process_logits(logits, [row]).tolist() == [[0.0, -math.inf, 1.5, -math.inf, -math.inf]]
    assert sample(logits, [row]).token_ids == [2]
    assert drawn_support(logits[0], draws=200, grammar=grammar) == {0, 2}


def test_a_forced_token_overrides_the_grammar():
    grammar = AllowOnly(0)
    out = sample(torch.zeros(1, 4), [make_row(forced_token=2, grammar=grammar)])
    assert out.token_ids == [2] and grammar.masks_filled == 0


def test_steering_leaves_the_callers_logits_untouched():
    logits = torch.tensor([[0.0, 5.0, 1.0], [1.0, 2.0, 3.0]])
    before = logits.clone()
    out = sample(logits, [make_row(grammar=AllowOnly(0), temperature=0.0), make_row(forced_token=1)])
    assert out.token_ids == [0, 1] and torch.equal(logits, before)


# --- seeds and batch invariance --------------------------------------------------


def seeded_run(steps, params, seed, position=0, neighbours=()):
    """Tokens a seeded row draws over `steps` when it sits at `position` among `neighbours`.

    Each step holds 8 rows of logits: row 0 is the seeded row's, the rest go to the neighbours in order.
    """
    target = make_row(params, seed=seed)
    batch = [make_row(p, seed=s) for p, s in neighbours]
    batch.insert(position, target)
    tokens = []
    for step in steps:
        others = step[1 : len(batch)]
        logits = torch.cat((others[:position], step[:1], others[position:]))
        out = sample(logits, batch)
        for row, token in zip(batch, out.token_ids):
            row.output_token_ids.append(token)
        tokens.append(out.token_ids[position])
    return tokens


def random_steps(vocab, steps=20, scale=3.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(8, vocab, generator=gen) * scale for _ in range(steps)]


NEIGHBOURS = [
    (SamplingParams(temperature=0.0), None),
    (SamplingParams(top_k=3000), 11),
    (SamplingParams(top_p=0.5, temperature=0.3), None),
    (SamplingParams(min_p=0.2), 12),
    (SamplingParams(repetition_penalty=1.3, frequency_penalty=0.5), None),
    (SamplingParams(top_k=5, top_p=0.8, min_p=0.05), 13),
    (SamplingParams(temperature=1.7, logit_bias={7: 3.0}), 14),
]

TARGETS = [
    SamplingParams(),
    SamplingParams(temperature=0.8, top_p=0.9),
    SamplingParams(top_k=40, min_p=0.05),
    SamplingParams(min_p=0.1, temperature=1.3),
    SamplingParams(top_p=0.95, presence_penalty=0.4),
]


@pytest.mark.parametrize("params", TARGETS)
def test_same_seed_gives_the_same_tokens_across_runs(params):
    steps = random_steps(4096)
    first = seeded_run(steps, params, seed=1234)
    assert seeded_run(steps, params, seed=1234) == first
    assert seeded_run(steps, params, seed=1235) != first


@pytest.mark.parametrize("params", TARGETS)
def test_seeded_row_is_batch_invariant(params):
    steps = random_steps(4096)
    alone = seeded_run(steps, params, seed=99)
    for position in (0, 3, 7):
        assert seeded_run(steps, params, seed=99, position=position, neighbours=NEIGHBOURS) == alone


def test_seeded_row_with_a_large_nucleus_is_batch_invariant():
    # A flat distribution makes the top_p=0.9 nucleus larger than the first candidate fetch;
    # the top_k=3000 neighbour changes how many candidates get fetched.
    steps = random_steps(5000, scale=1.5, seed=5)
    params = SamplingParams(top_p=0.9)
    alone = seeded_run(steps, params, seed=7)
    assert seeded_run(steps, params, seed=7, position=2, neighbours=NEIGHBOURS) == alone


def test_seeded_row_with_tied_logits_is_batch_invariant():
    # Whole-number logits tie in large groups; how ties come out of a partial top-k
    # depends on how many candidates the batch asks for.
    steps = [step.round() for step in random_steps(5000, scale=1.5, seed=9)]
    for params in (SamplingParams(top_p=0.9), SamplingParams(top_p=0.3, top_k=700)):
        alone = seeded_run(steps, params, seed=3)
        assert seeded_run(steps, params, seed=3, position=5, neighbours=NEIGHBOURS) == alone


def test_unseeded_rows_follow_the_global_generator():
    logits = torch.randn(16, 1000, generator=torch.Generator().manual_seed(6))
    torch.manual_seed(21)
    first = sample(logits, [make_row(top_p=0.9) for _ in range(16)]).token_ids
    torch.manual_seed(21)
    assert sample(logits, [make_row(top_p=0.9) for _ in range(16)]).token_ids == first


# --- logprobs ----------------------------------------------------------------------


def test_logprobs_match_log_softmax_with_ordered_alternatives():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0]])
    rows = [make_row(temperature=0.0, logprobs=2), make_row(temperature=0.0, logprobs=0), make_row(temperature=0.0)]
    out = sample(logits, rows)
    expected = torch.log_softmax(logits[0], dim=-1).tolist()
    assert out.token_ids == [2, 2, 2]
    assert out.logprobs[0] == TokenLogprobs(token_id=2, logprob=expected[2], top=[(2, expected[2]), (1, expected[1])])
    assert out.logprobs[1] == TokenLogprobs(token_id=2, logprob=expected[2], top=[])
    assert out.logprobs[2] is None


def test_logprobs_include_bias_but_not_temperature_or_truncation():
    logits = torch.tensor([[0.5, 2.0, 1.0]])
    row = make_row(temperature=0.5, top_k=1, logit_bias={0: 2.0}, logprobs=3, seed=0)
    out = sample(logits, [row])
    expected = torch.log_softmax(torch.tensor([2.5, 2.0, 1.0]), dim=-1).tolist()
    assert out.token_ids == [0]
    assert out.logprobs[0] == TokenLogprobs(
        token_id=0, logprob=expected[0], top=[(0, expected[0]), (1, expected[1]), (2, expected[2])]
    )


def test_logprob_alternatives_on_a_large_vocabulary_match_topk():
    gen = torch.Generator().manual_seed(12)
    logits = torch.randn(3, 20000, generator=gen)
    logits[1, 19999] = 9.0  # top entry in the partial last block
    out = sample(logits, [make_row(temperature=0.0, logprobs=20) for _ in range(3)])
    values, ids = torch.log_softmax(logits, dim=-1).topk(20, dim=-1)
    for lp, row_values, row_ids in zip(out.logprobs, values.tolist(), ids.tolist()):
        assert lp.top == list(zip(row_ids, row_values))


def test_sampled_token_logprob_is_reported_when_outside_the_alternatives():
    logits = torch.linspace(1.0, 0.0, 50)
    draws = 200
    out = sample(logits[None].expand(draws, -1), [make_row(logprobs=1, seed=s) for s in range(draws)])
    expected = torch.log_softmax(logits, dim=-1).tolist()
    others = [lp for lp in out.logprobs if lp.token_id != 0]
    assert others
    for lp in others:
        assert lp.logprob == expected[lp.token_id]
        assert lp.top == [(0, expected[0])]


# --- errors ------------------------------------------------------------------------


def test_row_count_must_match_logits():
    with pytest.raises(SamplerError, match="got 1 sample rows for 2 rows of logits"):
        sample(torch.zeros(2, 4), [make_row()])


def test_token_ids_outside_the_vocabulary_are_rejected():
    with pytest.raises(SamplerError, match=r"token id 9 is outside the vocabulary \[0, 4\)"):
        sample(torch.zeros(1, 4), [make_row(prompt=[1, 9], repetition_penalty=1.2)])


def test_rows_without_any_finite_logit_are_reported():
    logits = torch.zeros(3, 4)
    logits[1] = -math.inf
    logits[2, 0] = math.nan
    with pytest.raises(NoValidTokenError, match=r"rows \[1, 2\] have no finite maximum logit") as caught:
        sample(logits, [make_row(), make_row(temperature=0.0), make_row()])
    assert caught.value.rows == [1, 2]


# --- property: draws stay inside the allowed support -------------------------------


def allowed_support(logits, temperature, top_k, top_p, min_p, slack=1e-5):
    """Reference support in float64, widened by `slack` so float32 rounding at a cut cannot fail it."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    vocab = probs.numel()
    allowed = probs > 0
    if 0 < top_k < vocab:
        kth = probs.sort(descending=True).values[top_k - 1]
        allowed &= probs >= kth * (1 - slack)
    if top_p < 1.0:
        kept = torch.where(allowed, probs, 0.0)
        kept = kept / kept.sum()
        ordered = kept.sort(descending=True).values
        before = torch.cumsum(ordered, 0) - ordered
        cut = ordered[(before < top_p + slack).sum() - 1]
        allowed &= kept >= cut * (1 - slack)
    if min_p > 0.0:
        allowed &= probs >= min_p * probs.max() * (1 - slack)
    return set(allowed.nonzero().flatten().tolist())


def check_draws_stay_in_support(seed, temperature, top_k, top_p, min_p):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(64, generator=gen) * float(torch.rand(1, generator=gen) * 6)
    drawn = drawn_support(logits, draws=16, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    assert drawn <= allowed_support(logits, temperature, top_k, top_p, min_p)


def random_cases(count):
    rng = random.Random(8)
    return [
        (
            rng.randrange(1 << 30),
            rng.choice([1e-3, 0.3, 1.0, 2.0]),
            rng.choice([-1, 0, 1, 2, 5, 63, 64, 100]),
            rng.choice([1e-3, 0.3, 0.9, 1.0]),
            rng.choice([0.0, 0.05, 0.5, 1.0]),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize(("seed", "temperature", "top_k", "top_p", "min_p"), random_cases(60))
def test_draws_stay_in_support_for_sampled_settings(seed, temperature, top_k, top_p, min_p):
    check_draws_stay_in_support(seed, temperature, top_k, top_p, min_p)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    temperature=st.floats(0.01, 2.0),
    top_k=st.integers(-1, 80),
    top_p=st.floats(0.01, 1.0),
    min_p=st.floats(0.0, 1.0),
)
def test_draws_stay_in_support_property(seed, temperature, top_k, top_p, min_p):
    check_draws_stay_in_support(seed, temperature, top_k, top_p, min_p)
