"""`--draft-model`: a smaller model sharing the tokenizer drafts greedily and
the served model verifies; the output is the same as without drafts."""

from __future__ import annotations

import pytest
from test_speculative import drafts_per_step, run
from tiny_models import write_tiny_model

from inferd.config import EngineConfig
from inferd.engine import speculative
from inferd.engine.engine import Engine
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.speculative import StepCosts
from inferd.models.loader import load_model

PARAMS = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
PROMPTS = {"a": [2, 40, 41, 42, 43, 44, 45], "b": [2] + [3 + (i * 7) % 50 for i in range(30)]}


@pytest.fixture(scope="module")
def target(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def engine_for(target, draft_model: str | None, speculative: str = "ngram", row_cost: float = 0.1, **kw) -> Engine:
    kw = {"ctx_size": 128, "parallel": 2, "block_size": 4} | kw
    engine = Engine(target, EngineConfig(speculative=speculative, draft_model=draft_model, **kw))
    engine.speculator.costs = StepCosts(row_cost=row_cost, measure=False)
    return engine


def test_the_served_model_as_its_own_draft_is_accepted_throughout(target, tiny_model_dir):
    for rid, prompt in PROMPTS.items():
        plain = run(engine_for(target, None, "off"), {rid: (prompt, PARAMS)})
        engine = engine_for(target, str(tiny_model_dir))
        output, drafted = drafts_per_step(engine, prompt, PARAMS)
        assert output == plain[rid][0]
        s = engine.speculator
        assert s.accepted_total == s.drafted_total > 0  # the same model drafts what it then picks
        assert len(drafted) < 12  # 24 tokens in several per step


def test_another_model_drafts_and_the_output_is_unchanged(target, tiny_llama_dir):
    requests = {rid: (prompt, PARAMS) for rid, prompt in PROMPTS.items()}
    plain = run(engine_for(target, None, "off"), requests)
    engine = engine_for(target, str(tiny_llama_dir), row_cost=0.0, spec_max_batch=2)  # drafts whenever it may
    assert run(engine, requests) == plain
    assert engine.speculator.drafted_total > engine.speculator.accepted_total


def test_a_draft_model_that_fails_is_probed_with_growing_back_off(target, tmp_path):
    """A draft model whose drafts never hold stops drafting, then probes after 8, 16, 32 ... plain steps."""
    other = write_tiny_model(tmp_path / "other", seed=3)  # its drafts are replaced by ones that never hold
    params = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
    plain = run(engine_for(target, None, "off", ctx_size=160), {"x": (PROMPTS["a"], params)})["x"][0]
    engine = engine_for(target, str(other), row_cost=0.2, ctx_size=160)
    proposals = []
    drafter = engine.speculator.drafter
    drafter.propose = lambda req, n: proposals.append(len(req.output_token_ids)) or [0] * n
    output, _ = drafts_per_step(engine, PROMPTS["a"], params)
    assert output == plain and 0 not in plain
    gaps = [b - a for a, b in zip(proposals, proposals[1:])]
    backoff = speculative.FIRST_BACKOFF
    assert gaps == [1, 1, backoff, 2 * backoff, 4 * backoff]  # three tries in a row, then probes


def test_a_draft_model_with_another_tokenizer_is_refused(target, tmp_path):
    from gguf_models import hf_pieces, write_gguf

    cfg, _, _, state = hf_pieces("qwen2")
    write_gguf(tmp_path / "other.gguf", "qwen2", cfg, state)
    with pytest.raises(ValueError, match="does not share .* tokenizer"):
        engine_for(target, str(tmp_path / "other.gguf"))
    with pytest.raises(ValueError, match="--draft-model drafts for speculative decoding"):
        engine_for(target, str(tmp_path / "other.gguf"), speculative="off")


def test_auto_loads_no_draft_model_where_verification_is_not_exact(target, tiny_llama_dir, caplog):
    engine = engine_for(target, str(tiny_llama_dir), speculative="auto")  # a float32 model of dense layers
    assert engine.speculator.drafter is None and not engine.speculator.enabled
    assert "--speculative auto speculates only where verification is exact" in caplog.text


def test_drafts_stop_where_the_draft_models_context_ends(target, tiny_model_dir):
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    plain = run(engine_for(target, None, "off"), {"x": (PROMPTS["b"], params)})["x"][0]
    engine = engine_for(target, str(tiny_model_dir))
    drafter = engine.speculator.drafter
    drafter.max_len = len(PROMPTS["b"]) + 6  # the served model's context goes on past it
    calls = []  # (drafts asked, drafts made, positions the draft model then holds)
    propose = drafter.propose

    def recorded(req, n):
        drafts = propose(req, n)
        calls.append((n, len(drafts), len(drafter.sequences[req.slot].cached)))
        return drafts

    drafter.propose = recorded
    output, _ = drafts_per_step(engine, PROMPTS["b"], params)
    assert output == plain
    assert all(cached <= drafter.max_len for _, _, cached in calls)
    assert any(made < asked for asked, made, _ in calls)  # cut short by its context
