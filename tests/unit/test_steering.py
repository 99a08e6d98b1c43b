"""Per-request steering in the engine: the loop guard ends a repetition, the
thinking budget forces </think>, and reasoning tokens are counted exactly."""

from __future__ import annotations

import shutil

import pytest
from tokenizers import Tokenizer as InnerTokenizer

from inferd.chat.reasoning import think_token_ids
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model

THINK, END_THINK = 259, 260  # added after the 3 specials and 256 bytes
A = 3 + ord("a")


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-think") / "model"
    shutil.copytree(tiny_model_dir, folder)
    inner = InnerTokenizer.from_file(str(folder / "tokenizer.json"))
    inner.add_special_tokens(["<think>", "</think>"])
    inner.save(str(folder / "tokenizer.json"))
    loaded = load_model(str(folder), dtype="float32")
    config = EngineConfig(ctx_size=128, parallel=4, block_size=4)
    return Engine(loaded, config, think_ids=think_token_ids(loaded.tokenizer))


def generate(engine, params, prompt=(2, 50, 51), **kw):
    engine.add_request(EngineRequest("r", list(prompt), params, **kw))
    tokens, final = [], None
    while engine.has_work:
        for out in engine.step():
            tokens += out.token_ids
            final = out if out.finished else final
    return tokens, final


def test_the_engine_takes_the_single_token_think_markers(engine):
    assert engine.think_ids == (THINK, END_THINK)


def test_loop_guard_ends_a_repetition_at_the_exact_token(engine):
    params = SamplingParams(max_tokens=50, temperature=0, logit_bias={A: 100.0}, max_pattern_size=3, min_count=4)
    tokens, final = generate(engine, params)
    assert tokens == [A] * 4 and final.finish_reason == "stop"


def test_without_the_guard_the_repetition_runs_to_max_tokens(engine):
    tokens, final = generate(engine, SamplingParams(max_tokens=9, temperature=0, logit_bias={A: 100.0}))
    assert tokens == [A] * 9 and final.finish_reason == "length"


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_thinking_budget_forces_the_end_marker(engine, budget):
    params = SamplingParams(max_tokens=8, temperature=0, logit_bias={A: 100.0, END_THINK: -100.0},
                            thinking_budget=budget, ignore_eos=True)
    tokens, _ = generate(engine, params, reasoning_started=True)
    assert tokens[: budget + 1] == [A] * budget + [END_THINK]
    assert tokens[budget + 1 :] == [A] * (7 - budget)  # after </think> the bias rules again


def test_reasoning_counts_only_tokens_inside_think(engine):
    # Not started: the model opens <think> itself (forced here by the bias), then spends the budget.
    params = SamplingParams(max_tokens=6, temperature=0, logit_bias={THINK: 100.0, END_THINK: -100.0},
                            thinking_budget=2, ignore_eos=True)
    tokens, _ = generate(engine, params)
    assert tokens[0] == THINK and tokens[3] == END_THINK


def test_a_budget_above_max_tokens_is_refused(engine):
    with pytest.raises(ValueError, match="thinking_budget"):
        engine.add_request(EngineRequest("x", [2, 5], SamplingParams(max_tokens=4, thinking_budget=10)))


def test_without_think_ids_no_request_reasons(engine):
    plain = Engine(engine.loaded, engine.config)
    params = SamplingParams(max_tokens=3, temperature=0, logit_bias={A: 100.0}, thinking_budget=0, ignore_eos=True)
    tokens, _ = generate(plain, params, reasoning_started=True)
    assert tokens == [A] * 3  # a spent budget forces nothing: there is no </think> to force
