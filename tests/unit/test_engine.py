"""The engine end to end on a tiny random model (float32): batch invariance,
prefix-cache and chunking equivalence, preemption, finish reasons, aborts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.errors import RequestRejected
from inferd.engine.sampling_params import SamplingParams, SamplingParamsError
from inferd.models.loader import load_model
from validation_counter import count_validation


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def make_engine(loaded, **kw) -> Engine:
    kw.setdefault("ctx_size", 256)
    kw.setdefault("parallel", 8)
    kw.setdefault("block_size", 4)
    return Engine(loaded, EngineConfig(**kw))


def run(engine: Engine, requests: dict[str, tuple[list[int], SamplingParams]], **add_kw):
    for rid, (prompt, params) in requests.items():
        engine.add_request(EngineRequest(rid, prompt, params, **add_kw))
    tokens = {rid: [] for rid in requests}
    finals = {}
    while engine.has_work:
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)
            if out.finished:
                finals[out.request_id] = out
    return tokens, finals


def prompt(n: int, start: int = 3) -> list[int]:
    return [2] + [(start + 7 * i) % 250 + 3 for i in range(n - 1)]


GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def test_alone_and_among_seven_neighbours_give_the_same_greedy_tokens(loaded):
    alone, _ = run(make_engine(loaded), {"x": (prompt(11), GREEDY)})
    crowd = {f"n{i}": (prompt(3 + 5 * i, start=i), SamplingParams(max_tokens=4 + i, temperature=0.0, ignore_eos=True))
             for i in range(7)}
    crowd["x"] = (prompt(11), GREEDY)
    together, _ = run(make_engine(loaded), crowd)
    assert together["x"] == alone["x"]
    assert len(alone["x"]) == 12


def test_prefix_cache_hit_gives_the_cold_tokens_and_reports_cached_tokens(loaded):
    engine = make_engine(loaded)
    cold, finals = run(engine, {"a": (prompt(30), GREEDY)})
    assert finals["a"].usage.cached_tokens == 0
    warm, finals = run(engine, {"b": (prompt(30), GREEDY)})
    assert warm["b"] == cold["a"]
    assert finals["b"].usage.cached_tokens == 28  # 7 full blocks of 4; the last block is recomputed
    assert engine.stats().prefix_cache_hits == 7


def test_cache_prompt_false_is_a_cold_prefill(loaded):
    engine = make_engine(loaded)
    run(engine, {"a": (prompt(30), GREEDY)})
    _, finals = run(engine, {"b": (prompt(30), GREEDY)}, cache_prompt=False)
    assert finals["b"].usage.cached_tokens == 0


def test_chunked_prefill_gives_the_same_tokens(loaded):
    whole, _ = run(make_engine(loaded, max_batched_tokens=512), {"a": (prompt(40), GREEDY)})
    chunked, _ = run(make_engine(loaded, max_batched_tokens=7), {"a": (prompt(40), GREEDY)})
    assert chunked == whole


def test_preemption_under_a_small_pool_gives_the_same_tokens(loaded):
    reqs = {f"r{i}": (prompt(10, start=i), SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))
            for i in range(4)}
    ample, _ = run(make_engine(loaded), reqs)
    # 20 blocks of 4 tokens: 4 sequences of 30 tokens cannot all stay resident.
    small = make_engine(loaded, num_kv_blocks=20, ctx_size=64, parallel=4)
    tight, finals = run(small, reqs)
    assert tight == ample
    assert small.stats().preemptions > 0
    assert small.pool.num_used == 0


def test_seeded_sampling_is_batch_invariant(loaded):
    seeded = SamplingParams(max_tokens=10, temperature=1.0, seed=1234, ignore_eos=True)
    alone, _ = run(make_engine(loaded), {"x": (prompt(9), seeded)})
    crowd = {f"n{i}": (prompt(5 + i, start=i), SamplingParams(max_tokens=10, temperature=1.0, ignore_eos=True))
             for i in range(5)}
    crowd["x"] = (prompt(9), seeded)
    together, _ = run(make_engine(loaded), crowd)
    assert together["x"] == alone["x"]


def test_finish_reasons(loaded):
    engine = make_engine(loaded)
    toks, finals = run(engine, {"len": (prompt(5), SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))})
    assert finals["len"].finish_reason == "length" and len(toks["len"]) == 3
    first = toks["len"][0]
    toks, finals = run(engine, {"stop": (prompt(5), SamplingParams(max_tokens=3, temperature=0.0, stop_token_ids=[first]))})
    assert finals["stop"].finish_reason == "stop" and finals["stop"].stop_reason == first
    assert toks["stop"] == [first] and finals["stop"].text == ""
    assert finals["stop"].usage.completion_tokens == 1


def test_eos_ends_generation_unless_ignored(loaded):
    engine = make_engine(loaded)
    biased = SamplingParams(max_tokens=5, temperature=0.0, logit_bias={1: 100.0})
    toks, finals = run(engine, {"a": (prompt(5), biased)})
    assert toks["a"] == [1] and finals["a"].finish_reason == "stop" and finals["a"].stop_reason == 1
    ignoring = SamplingParams(max_tokens=5, temperature=0.0, logit_bias={1: 100.0}, ignore_eos=True)
    toks, finals = run(engine, {"b": (prompt(5), ignoring)})
    assert toks["b"] == [1] * 5 and finals["b"].finish_reason == "length"


def test_context_full_finishes_with_length(loaded):
    engine = make_engine(loaded, ctx_size=16)
    toks, finals = run(engine, {"a": (prompt(10), SamplingParams(max_tokens=None, temperature=0.0, ignore_eos=True))})
    assert len(toks["a"]) == 6 and finals["a"].finish_reason == "length"


def test_abort_frees_blocks_at_once(loaded):
    engine = make_engine(loaded)
    engine.add_request(EngineRequest("a", prompt(20), SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)))
    engine.step()
    assert engine.pool.num_used > 0
    out = engine.abort("a")
    assert out.finished and out.finish_reason == "abort"
    assert engine.pool.num_used == 0 and not engine.has_work
    assert engine.abort("a") is None


def test_bad_requests_are_refused_before_admission(loaded):
    engine = make_engine(loaded, ctx_size=32)
    with pytest.raises(RequestRejected, match="context size is 32"):
        engine.add_request(EngineRequest("a", prompt(40), SamplingParams(max_tokens=1)))
    with pytest.raises(RequestRejected, match="outside the vocabulary"):
        engine.add_request(EngineRequest("b", [5, 100000], SamplingParams(max_tokens=1)))
    with pytest.raises(ValueError, match="temperature"):
        engine.add_request(EngineRequest("c", prompt(4), SamplingParams(temperature=-1.0)))
    assert not engine.has_work


def test_text_deltas_join_to_the_full_decode(loaded):
    engine = make_engine(loaded)
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=7, ignore_eos=True)
    engine.add_request(EngineRequest("a", prompt(6), params))
    text, ids = "", []
    while engine.has_work:
        for out in engine.step():
            text += out.text
            ids += out.token_ids
    assert text == loaded.tokenizer.decode(ids)


def test_a_request_with_no_samplable_token_fails_alone(loaded):
    engine = make_engine(loaded)
    banned = SamplingParams(max_tokens=3, temperature=0.0, logit_bias={t: float("-inf") for t in range(272)})
    toks, finals = run(engine, {"bad": (prompt(5), banned), "good": (prompt(6), GREEDY)})
    assert finals["bad"].finish_reason == "error" and "logit_bias" in finals["bad"].error
    assert finals["good"].finish_reason == "length" and len(toks["good"]) == 12
    assert engine.pool.num_used == 0


def test_a_request_is_validated_exactly_once(loaded, monkeypatch):
    engine = make_engine(loaded)
    counts = count_validation(monkeypatch)
    _, finals = run(engine, {"a": (prompt(6), GREEDY)})
    assert finals["a"].finish_reason == "length"
    assert counts == {"validate": 1, "check_fits": 1}


def test_requests_with_different_cache_salts_share_no_cached_blocks(loaded):
    engine = make_engine(loaded)
    cold, _ = run(engine, {"a": (prompt(30), GREEDY)}, cache_salt="tenant-a")
    for rid, salt in (("b", "tenant-b"), ("c", None)):
        _, finals = run(engine, {rid: (prompt(30), GREEDY)}, cache_salt=salt)
        assert finals[rid].usage.cached_tokens == 0
    warm, finals = run(engine, {"d": (prompt(30), GREEDY)}, cache_salt="tenant-a")
    assert finals["d"].usage.cached_tokens == 28 and warm["d"] == cold["a"]


def test_a_cache_salt_must_be_a_string(loaded):
    engine = make_engine(loaded)
    with pytest.raises(RequestRejected, match="cache_salt must be a string"):
        engine.add_request(EngineRequest("a", prompt(4), GREEDY, cache_salt=7))


def test_the_engine_leaves_chat_alone_and_its_request_types_leave_torch_alone():
    script = (
        "import json, sys; import inferd.engine.engine_request, inferd.engine.errors, inferd.engine.outputs; "
        "light = sorted(m for m in sys.modules if m == 'torch' or m.startswith('inferd.')); "
        "import inferd.engine.async_engine; "
        "print(json.dumps([light, sorted(m for m in sys.modules if m.startswith('inferd.chat'))]))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    light, chat = json.loads(out.stdout)
    assert "torch" not in light and chat == []


# -- per-request sizes are bounded; one request's failure is its own ------------------------------


@pytest.mark.parametrize("size", [10**12, 10**7, 129])
def test_a_loop_guard_longer_than_the_context_is_refused_naming_the_field(loaded, size):
    engine = make_engine(loaded)  # a 256-token context: 2 copies of 129 tokens can never be seen
    params = SamplingParams(max_tokens=4, max_pattern_size=size, min_count=2)
    with pytest.raises(SamplingParamsError) as caught:
        engine.add_request(EngineRequest("a", prompt(4), params))
    assert caught.value.field == "max_pattern_size"
    assert "max_pattern_size" in str(caught.value) and "256" in str(caught.value)
    assert not engine.has_work


def test_a_huge_min_count_is_refused_too(loaded):
    engine = make_engine(loaded)
    with pytest.raises(SamplingParamsError, match="min_count") as caught:
        engine.add_request(EngineRequest("a", prompt(4), SamplingParams(max_pattern_size=1, min_count=10**12)))
    assert caught.value.field == "min_count"


def test_a_loop_guard_that_fits_the_context_runs(loaded):
    engine = make_engine(loaded)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, max_pattern_size=128, min_count=2)
    _, finals = run(engine, {"a": (prompt(4), params)})
    assert finals["a"].finish_reason in ("length", "stop")


class RaisingConstraint:
    """A grammar that allows every token but fails in `method` (an engine bug or a broken grammar object)."""

    def __init__(self, method: str):
        self.method = method

    def fill_mask(self, bitmask, row):
        if self.method == "fill_mask":
            raise RuntimeError("fill_mask blew up")

    def accept(self, token_id):
        if self.method == "accept":
            raise RuntimeError("accept blew up")

    finished = False
    error = None


@pytest.mark.parametrize("method", ["fill_mask", "accept"])
def test_a_request_whose_step_work_raises_fails_alone(loaded, method):
    engine = make_engine(loaded)
    engine.add_request(EngineRequest("bad", prompt(5), GREEDY, constraint=RaisingConstraint(method)))
    toks, finals = run(engine, {"good": (prompt(6), GREEDY)})
    assert finals["bad"].finish_reason == "error" and finals["bad"].error
    assert finals["bad"].error_is_client is False
    assert finals["good"].finish_reason == "length" and len(toks["good"]) == 12
    assert engine.pool.num_used == 0 and not engine.requests


def test_a_failed_admission_leaves_no_trace(loaded, monkeypatch):
    import inferd.engine.engine as engine_module

    real = engine_module.StopRules

    def stop_rules(params, *args, **kw):
        if params.max_tokens == 7:
            raise MemoryError("no room")
        return real(params, *args, **kw)

    monkeypatch.setattr(engine_module, "StopRules", stop_rules)
    engine = make_engine(loaded)
    with pytest.raises(MemoryError):
        engine.add_request(EngineRequest("bad", prompt(5), SamplingParams(max_tokens=7)))
    assert not engine.has_work and not engine.requests
    toks, finals = run(engine, {"good": (prompt(6), GREEDY)})
    assert finals["good"].finish_reason == "length" and len(toks["good"]) == 12
