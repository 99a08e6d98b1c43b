"""Prompt-lookup speculative decoding on a tiny random model (float32): the
proposer, and the engine's output, token for token, text, finish and cache
state, the same with and without speculation."""

from __future__ import annotations

import pytest

from inferd.config import EngineConfig
from inferd.engine import speculative
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.request import Request
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.speculative import can_speculate, propose_ngram, StepCosts
from inferd.models.loader import load_model


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def make_engine(loaded, speculative: str, row_cost: float = 0.1, **kw) -> Engine:
    """`row_cost`: what the guard takes a verified row to cost (a fixed model, not this host's timings)."""
    kw.setdefault("ctx_size", 256)
    kw.setdefault("parallel", 8)
    kw.setdefault("block_size", 4)
    kw.setdefault("spec_max_batch", 8)
    engine = Engine(loaded, EngineConfig(speculative=speculative, **kw))
    engine.speculator.costs = StepCosts(row_cost=row_cost, measure=False)
    return engine


def run(engine: Engine, requests: dict[str, tuple[list[int], SamplingParams]]):
    """Per request: (token ids, text, finish_reason, stop_reason, completion tokens)."""
    for rid, (prompt, params) in requests.items():
        engine.add_request(EngineRequest(rid, prompt, params))
    tokens = {rid: [] for rid in requests}
    text = {rid: "" for rid in requests}
    finals = {}
    while engine.has_work:
        for out in engine.step():
            tokens[out.request_id] += out.token_ids
            text[out.request_id] += out.text
            if out.finished:
                finals[out.request_id] = out
    assert engine.pool.num_used == 0  # every block came back
    return {rid: (tokens[rid], text[rid], finals[rid].finish_reason, finals[rid].stop_reason,
                  finals[rid].usage.completion_tokens) for rid in requests}


def both(loaded, requests, **kw):
    """Outputs without and with speculation, and the two engines."""
    plain_engine, engine = make_engine(loaded, "off", **kw), make_engine(loaded, "ngram", **kw)
    return run(plain_engine, requests), run(engine, requests), plain_engine, engine


def repeating(seed: int, n: int = 24) -> list[int]:  # a prompt that repeats itself: drafts hold
    return [2] + [3 + (i * seed) % 11 for i in range(n)]


def varied(seed: int, n: int = 20) -> list[int]:
    return [2] + [(3 + 7 * i * seed) % 250 + 3 for i in range(n)]


GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
# The tiny model repeats one token under plain greedy; a frequency penalty makes it move on,
# so some drafts are accepted and some rejected.
PENALISED = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True, frequency_penalty=2.0)


def test_the_proposer_continues_the_most_recent_longest_match():
    assert propose_ngram([5, 6, 7, 8, 9, 5, 6, 7], 3) == [8, 9, 5]
    assert propose_ngram([1, 2, 3, 1, 2, 4, 1, 2], 2, max_n=2) == [4, 1]  # the latest "1 2"
    assert propose_ngram([1, 2, 3, 9, 2, 3, 4, 2, 3], 4, max_n=3) == [4, 2, 3]  # stops at the end
    assert propose_ngram([1, 2, 3, 4], 4) == []  # no earlier occurrence
    assert propose_ngram([7, 1, 8, 1], 2, min_n=2) == []  # only a 1-token match, below min_n
    assert propose_ngram([1, 2, 1], 0) == []


def test_greedy_output_is_identical_with_drafts_accepted_and_rejected(loaded):
    requests = {"r": (repeating(1), GREEDY), "v": (varied(1), PENALISED)}
    requests |= {f"p{s}": (repeating(s), PENALISED) for s in range(1, 4)}
    plain, spec, plain_engine, engine = both(loaded, requests)
    assert spec == plain
    s = engine.speculator
    assert 0 < s.accepted_total < s.drafted_total  # both outcomes were exercised
    assert engine.stats().steps < plain_engine.stats().steps  # several tokens per step


def test_max_tokens_and_stop_strings_landing_inside_a_draft(loaded):
    base = run(make_engine(loaded, "off"), {"x": (repeating(3), PENALISED)})["x"]
    text = base[1]
    requests = {}
    for n in range(1, 6):  # every max_tokens around the first drafts
        requests[f"m{n}"] = (repeating(3), SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True,
                                                          frequency_penalty=2.0))
    for i, stop in enumerate({text[5:8], text[11:13]}):
        for include in (False, True):
            requests[f"s{i}{include}"] = (repeating(3), SamplingParams(
                max_tokens=20, temperature=0.0, ignore_eos=True, frequency_penalty=2.0, stop=[stop],
                include_stop_str_in_output=include))
    plain, spec, _, engine = both(loaded, requests)
    assert spec == plain
    assert {r[2] for r in plain.values()} == {"length", "stop"}
    assert engine.speculator.accepted_total > 0


def test_speculating_and_sampled_requests_share_a_batch(loaded):
    sampled = SamplingParams(max_tokens=12, temperature=0.9, seed=7, ignore_eos=True)
    with_logprobs = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    requests = {"g": (repeating(2), PENALISED), "s": (repeating(2), sampled), "l": (repeating(5), with_logprobs)}
    plain, spec, _, engine = both(loaded, requests)
    assert spec == plain
    assert engine.speculator.accepted_total > 0
    assert not can_speculate(Request("s", [2], sampled))
    assert not can_speculate(Request("l", [2], with_logprobs))


def test_preemption_and_the_prefix_cache_are_unchanged(loaded):
    # 11 blocks of 4 tokens for three 28-token sequences: requests are preempted and recomputed.
    requests = {f"p{s}": (repeating(s, 7), PENALISED) for s in range(1, 4)}
    plain, spec, _, engine = both(loaded, requests, num_kv_blocks=11, ctx_size=44)
    assert spec == plain
    assert engine.stats().preemptions > 0 and engine.speculator.accepted_total > 0

    # Cached blocks are hashed over accepted tokens only: the same hashes as without speculation.
    first = {f"c{s}": (repeating(s), PENALISED) for s in range(1, 3)}
    plain, spec, plain_engine, engine = both(loaded, first)
    assert spec == plain
    assert set(engine.pool.cached) == set(plain_engine.pool.cached)
    again = {f"again{rid}": (repeating(s) + out[0][:9], PENALISED) for s, (rid, out) in zip(range(1, 3), plain.items())}
    assert run(engine, again) == run(plain_engine, again)
    assert engine.stats().prefix_cache_hits == plain_engine.stats().prefix_cache_hits > 0


def drafts_per_step(engine: Engine, prompt: list[int], params: SamplingParams) -> tuple[list[int], list[int]]:
    """One request alone: its output, and how many drafts each step verified."""
    engine.add_request(EngineRequest("x", prompt, params))
    output, drafted = [], []
    while engine.has_work:
        before = engine.speculator.drafted_total
        for out in engine.step():
            output += out.token_ids
        drafted.append(engine.speculator.drafted_total - before)
    return output, drafted


def test_the_guard_stops_drafting_for_a_request_whose_drafts_fail(loaded, monkeypatch):
    monkeypatch.setattr(speculative, "propose_ngram", lambda tokens, num_tokens, **kw: [0] * num_tokens)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    plain = run(make_engine(loaded, "off"), {"x": (repeating(2), params)})["x"][0]
    engine = make_engine(loaded, "ngram", spec_tokens=4)
    output, drafted = drafts_per_step(engine, repeating(2), params)
    assert output == plain and 0 not in plain  # every draft fails
    assert engine.speculator.accepted_total == 0
    verifying = [i for i, n in enumerate(drafted) if n]
    assert 0 < len(verifying) <= 5 and verifying[-1] < 8  # a few tries, then plain steps to the end
    assert len(drafted) > 30


def test_the_guard_weighs_acceptance_against_the_cost_of_a_verified_row(loaded):
    """The same drafts, held as often, verified when a row is cheap, not when it is dear."""
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    cheap, dear = make_engine(loaded, "ngram", row_cost=0.05), make_engine(loaded, "ngram", row_cost=1.0)
    assert drafts_per_step(cheap, repeating(1), params)[0] == drafts_per_step(dear, repeating(1), params)[0]
    assert cheap.speculator.drafted_total > 0 and dear.speculator.drafted_total == 0  # 1 + p per 1 + 1 row: never


def test_a_request_that_starts_copying_starts_speculating(loaded, monkeypatch):
    """Drafts that fail stop speculation; drafts checked against the plain output meanwhile (no
    verification) show when they hold again, and speculation resumes."""
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    prompt = repeating(3)
    plain = run(make_engine(loaded, "off"), {"x": (prompt, params)})["x"][0]

    def oracle(tokens, num_tokens, **kw):  # wrong for the first 16 output tokens, then the true continuation
        done = len(tokens) - len(prompt)
        return [0] * num_tokens if done < 16 else plain[done : done + num_tokens]

    monkeypatch.setattr(speculative, "propose_ngram", oracle)
    engine = make_engine(loaded, "ngram", spec_tokens=4)
    output, drafted = drafts_per_step(engine, prompt, params)
    assert output == plain
    verifying = [i for i, n in enumerate(drafted) if n]
    gaps = [b - a for a, b in zip(verifying, verifying[1:])]
    assert max(gaps) > 5  # stopped while drafts failed ...
    assert engine.speculator.accepted_total > 20  # ... and verified again once they held
    assert len(drafted) < 40  # several tokens per step once copying


def test_step_costs_learn_a_verified_rows_cost_from_the_engines_steps():
    costs = StepCosts(row_cost=0.3)
    costs.observe(5, 0.5)  # no plain step yet: nothing to compare with
    assert costs.ratio(5) == pytest.approx(1 + 4 * 0.3)
    costs.observe(1, 0.1)
    assert costs.ratio(5) == pytest.approx(5.0)  # 0.1 s a row over a 0.1 s step
    costs.observe(3, 0.5)  # averages: a verifying step of 4.8 rows in 0.5 s
    assert costs.ratio(2) == pytest.approx(1 + (0.5 - 0.1) / 3.8 / 0.1)
    assert costs.ratio(1) == 1.0
    fixed = StepCosts(row_cost=0.2, measure=False)
    fixed.observe(1, 0.1)
    fixed.observe(3, 0.5)
    assert fixed.ratio(3) == pytest.approx(1.4) and fixed.ratio(3, requests=4) == pytest.approx(1.4)


def test_step_costs_weigh_a_row_against_a_requests_share_of_its_batchs_step():
    costs = StepCosts(row_cost=0.3)
    assert costs.ratio(3, requests=2) == pytest.approx(1 + 2 * 0.6)  # unseen: the prior, times the requests
    costs.observe(2, 0.1, requests=2)  # two requests' plain step
    costs.observe(4, 0.14, requests=2)  # two drafts verified beside them: 0.02 s a row
    assert costs.ratio(3, requests=2) == pytest.approx(1 + 2 * 0.02 / (0.1 / 2))
    assert costs.ratio(3) == pytest.approx(1 + 2 * 0.3)  # one request's steps are another batch


def test_the_guard_starts_again_only_past_a_margin():
    s = speculative.Speculator("ngram", 4, 1, 256, costs=StepCosts(row_cost=0.5, measure=False))
    record = speculative.DraftRecord(tried=10.0, held=4.0)  # p = 0.4: one draft yields 1.4 tokens for 1.5 steps
    assert s.draft_length(record, 4) == 0 and not record.speculating
    record.held = 5.5  # 1.55 / 1.5 = 1.03: would pay, not by the margin to start again
    assert s.draft_length(record, 4) == 0
    record.held = 7.0  # 1 + 0.7 + 0.49 over 2 steps = 1.095, two drafts; ... 1.7 / 1.5 = 1.13 with one
    assert s.draft_length(record, 4) == 1 and record.speculating
    record.held = 5.5  # speculating: kept while it pays at all
    assert s.draft_length(record, 4) == 1
    assert s.draft_length(record, 0) == 0 and record.speculating  # nothing to draft decides nothing


def test_no_drafts_while_more_requests_run_than_the_limit(loaded):
    requests = {f"r{s}": (repeating(s), SamplingParams(max_tokens=4 + 6 * s, temperature=0.0, ignore_eos=True))
                for s in range(1, 4)}
    plain, spec, _, engine = both(loaded, requests, spec_max_batch=2)
    assert spec == plain
    assert engine.speculator.drafted_total > 0  # once only two were left running
    crowded = make_engine(loaded, "ngram", spec_max_batch=2)
    for rid, (prompt, params) in requests.items():
        crowded.add_request(EngineRequest(rid, prompt, params))
    for _ in range(4):  # all three running
        crowded.step()
        assert crowded.speculator.drafted_total == 0


def test_unknown_method_is_refused(loaded):
    with pytest.raises(ValueError, match="--speculative must be one of off, ngram, auto"):
        make_engine(loaded, "eagle")


def test_the_engine_times_its_lone_steps_for_the_guard(loaded):
    engine = Engine(loaded, EngineConfig(speculative="ngram", ctx_size=256, parallel=2, block_size=4))
    costs = engine.speculator.costs
    assert costs.measure and costs.batches == {}
    run(engine, {"x": (repeating(1), GREEDY)})  # drafts hold: plain and verifying steps both
    assert engine.speculator.drafted_total > 0
    alone = costs.batches[1]
    assert alone.plain_seconds > 0 and alone.verify_rows >= 1
    assert costs.row_cost() == max(0.0, alone.verify_seconds - alone.plain_seconds) / alone.verify_rows \
        / alone.plain_seconds
    sampled = Engine(loaded, EngineConfig(speculative="ngram", ctx_size=256, parallel=2, block_size=4))
    run(sampled, {"s": (repeating(1), SamplingParams(max_tokens=8, temperature=0.8, seed=1))})
    assert sampled.speculator.costs.batches == {}  # a step that could not speculate is not compared


def test_the_engine_times_two_requests_steps_apart(loaded):
    engine = Engine(loaded, EngineConfig(speculative="ngram", ctx_size=256, parallel=2, block_size=4,
                                         spec_max_batch=2))
    plain = make_engine(loaded, "off", parallel=2)
    seen = []
    observe = engine.speculator.costs.observe
    engine.speculator.costs.observe = lambda rows, seconds, requests=1: seen.append((requests, rows)) or \
        observe(rows, seconds, requests)
    requests = {"x": (repeating(1), GREEDY), "y": (repeating(2), GREEDY)}
    assert run(engine, requests) == run(plain, requests)
    assert engine.speculator.drafted_total > 0
    pairs = [rows for requests, rows in seen if requests == 2]
    assert pairs and max(pairs) > 2  # both decoding, drafts verified beside them
    assert set(engine.speculator.costs.batches) == {requests for requests, _ in seen}
