"""A step whose every request needs only its argmax (greedy, no logprobs,
nothing adjusting the logits) takes its tokens from the GGUF head's kernel,
which never writes the logits; the tokens are exactly those the sampler picks
from the logits, and any other step keeps the logits path."""

from __future__ import annotations

import collections

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_models import write_kernel_gguf

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling.logits_processing import adjusts_logits, process_logits
from inferd.engine.sampling.sampler import SampleRow, argmax_is_enough
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model

QTYPES = {"q_proj": Q.Q5_0, "k_proj": Q.Q8_0, "v_proj": Q.Q8_0, "o_proj": Q.Q4_0, "gate_proj": Q.Q5_0,
          "up_proj": Q.Q8_0, "down_proj": Q.Q4_0, "embed_tokens": Q.Q8_0, "lm_head": Q.Q8_0}


@pytest.fixture(scope="module", params=[("gemma3", "bfloat16"), ("llama", "float32")], ids=["gemma3", "llama-float32"])
def gguf_model(request, tmp_path_factory):
    arch, dtype = request.param
    path = tmp_path_factory.mktemp("gguf") / f"{arch}.gguf"
    write_kernel_gguf(path, arch, QTYPES)
    return load_model(str(path), dtype=dtype, data_dir=str(tmp_path_factory.mktemp("data")))


def generate(loaded, requests: dict[str, tuple[list[int], SamplingParams]], from_head: bool = True):
    """Each request's tokens, and how many steps took their tokens from the head."""
    engine = Engine(loaded, EngineConfig(speculative="off", ctx_size=256, parallel=4, block_size=16,
                                         max_batched_tokens=32))
    if not from_head:
        engine._argmax_only = lambda requests: False
    real_run, picked = engine.runner.run, collections.Counter()

    def run(batch, argmax_only=None):
        result = real_run(batch, argmax_only)
        picked[result.token_ids is not None] += 1
        assert (result.token_ids is None) == (result.logits is not None)
        return result

    engine.runner.run = run
    for rid, (prompt, params) in requests.items():
        engine.add_request(EngineRequest(rid, prompt, params))
    out = collections.defaultdict(list)
    while engine.has_work:
        for o in engine.step():
            out[o.request_id] += o.token_ids
            assert o.error is None, o.error
    return dict(out), picked[True]


def prompt(n: int, start: int) -> list[int]:
    return [2] + [3 + (start + 7 * i) % 50 for i in range(n)]


GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def test_greedy_steps_take_the_heads_argmax_and_the_same_tokens(gguf_model):
    requests = {f"r{i}": (prompt(5 + 9 * i, i), GREEDY) for i in range(4)}  # prefills beside decodes, then decodes
    via_head, picked = generate(gguf_model, requests)
    via_logits, none = generate(gguf_model, requests, from_head=False)
    assert via_head == via_logits
    assert picked > 10 and none == 0


def test_a_request_that_needs_its_logits_keeps_every_step_it_shares_on_the_logits_path(gguf_model):
    wanting = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    requests = {"greedy": (prompt(6, 1), GREEDY), "logprobs": (prompt(6, 2), wanting)}
    both, picked = generate(gguf_model, requests)
    assert picked == 0
    assert both["greedy"] == generate(gguf_model, {"greedy": (prompt(6, 1), GREEDY)})[0]["greedy"]


def test_a_row_with_no_finite_maximum_fails_alone(gguf_model, monkeypatch):
    calls = []

    def greedy_tokens(hidden):
        calls.append(hidden.shape[0])
        return [-1] + [5] * (hidden.shape[0] - 1) if len(calls) == 3 else [5] * hidden.shape[0]

    monkeypatch.setattr(gguf_model.model, "greedy_tokens", greedy_tokens)
    engine = Engine(gguf_model, EngineConfig(speculative="off", ctx_size=256, parallel=2, block_size=16))
    for rid in ("a", "b"):
        engine.add_request(EngineRequest(rid, prompt(4, 0), GREEDY))
    outputs = collections.defaultdict(list)
    while engine.has_work:
        for o in engine.step():
            outputs[o.request_id].append(o)
    failed = [rid for rid, outs in outputs.items() if outs[-1].error]
    assert len(failed) == 1 and "no token can be sampled" in outputs[failed[0]][-1].error
    (kept,) = set(outputs) - set(failed)
    assert sum(len(o.token_ids) for o in outputs[kept]) == GREEDY.max_tokens


ROWS = {
    "plain": SampleRow(GREEDY, [1, 2], [3], None, frozenset({1})),
    "forced": SampleRow(GREEDY, [1, 2], [3], None, frozenset({1}), forced_token=4),
    "bias": SampleRow(SamplingParams(temperature=0.0, logit_bias={5: 1.0}), [1], [], None, frozenset({1})),
    "repetition": SampleRow(SamplingParams(temperature=0.0, repetition_penalty=1.1), [1], [], None, frozenset({1})),
    "presence": SampleRow(SamplingParams(temperature=0.0, presence_penalty=0.5), [1], [3], None, frozenset({1})),
    "presence, nothing out yet": SampleRow(SamplingParams(temperature=0.0, presence_penalty=0.5), [1], [], None,
                                           frozenset({1})),
    "min_tokens": SampleRow(SamplingParams(temperature=0.0, min_tokens=2), [1], [3], None, frozenset({1})),
    "min_tokens met": SampleRow(SamplingParams(temperature=0.0, min_tokens=1), [1], [3], None, frozenset({1})),
}


@pytest.mark.parametrize("name", ROWS)
def test_a_row_needs_its_logits_exactly_when_processing_changes_them(name):
    row = ROWS[name]
    logits = torch.randn(1, 8)
    assert adjusts_logits(row) == (process_logits(logits, [row]) is not logits)
    assert argmax_is_enough(row) == (not adjusts_logits(row))


def test_sampled_rows_and_rows_asking_for_logprobs_need_their_logits():
    for params in (SamplingParams(temperature=0.7), SamplingParams(temperature=0.0, logprobs=0)):
        assert not argmax_is_enough(SampleRow(params, [1], [], None, frozenset()))
