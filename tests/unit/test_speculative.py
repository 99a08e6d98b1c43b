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
from inferd.engine.speculative import can_speculate, propose_ngram
from inferd.models.loader import load_model


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def make_engine(loaded, speculative: str, **kw) -> Engine:
    kw.setdefault("ctx_size", 256)
    kw.setdefault("parallel", 8)
    kw.setdefault("block_size", 4)
    kw.setdefault("spec_max_batch", 8)
    return Engine(loaded, EngineConfig(speculative=speculative, **kw))


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


def test_the_guard_stops_drafting_for_a_request_whose_drafts_fail(loaded, monkeypatch):
    monkeypatch.setattr(speculative, "propose_ngram", lambda tokens, num_tokens, **kw: [0] * num_tokens)
    requests = {"x": (repeating(2), GREEDY)}
    plain, spec, _, engine = both(loaded, requests, spec_tokens=4)
    assert spec == plain
    s = engine.speculator
    assert s.accepted_total == 0
    assert s.drafted_total == speculative.GUARD_MIN_DRAFTED  # then it stopped proposing


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
    with pytest.raises(ValueError, match="--speculative must be one of off, ngram"):
        make_engine(loaded, "eagle")
