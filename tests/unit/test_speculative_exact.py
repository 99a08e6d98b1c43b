"""Speculative verification computes each row exactly as a lone decode step
does: on a GGUF model's own blocks (bf16 or float32, the kernels' int8 activations),
every logit of every verified row is bit for bit the logit plain decoding
computes at that position, and so the greedy output is the same."""

from __future__ import annotations

import collections

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_models import write_kernel_gguf

from inferd.arch.file_blocks import computes_lone_rows_exactly
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.speculative import StepCosts
from inferd.models.loader import load_model

# Every projection on a kernel-computed format, a few formats side by side.
QTYPES = {"q_proj": Q.Q4_0, "k_proj": Q.Q5_0, "v_proj": Q.Q8_0, "o_proj": Q.Q8_0, "gate_proj": Q.Q5_0,
          "up_proj": Q.Q8_0, "down_proj": Q.Q4_0, "embed_tokens": Q.Q8_0, "lm_head": Q.Q8_0}


@pytest.fixture(scope="module", params=[("gemma3", "bfloat16"), ("llama", "bfloat16"), ("gemma3", "float32")],
                ids=["gemma3", "llama", "gemma3-float32"])
def gguf_model(request, tmp_path_factory):
    arch, dtype = request.param
    path = tmp_path_factory.mktemp("gguf") / f"{arch}.gguf"
    write_kernel_gguf(path, arch, QTYPES)
    return load_model(str(path), dtype=dtype, data_dir=str(tmp_path_factory.mktemp("data")))


def engine_for(loaded, speculative: str) -> Engine:
    engine = Engine(loaded, EngineConfig(speculative=speculative, ctx_size=256, parallel=2, block_size=16,
                                         spec_tokens=5))
    engine.speculator.costs = StepCosts(row_cost=0.0, measure=False)  # verify whenever a draft may hold
    return engine


def logits_by_position(engine: Engine, prompt: list[int], params: SamplingParams):
    """The output, and the logits of every row whose input tokens are the output's,
    by the position of its input token."""
    computed = []  # (position, drafts before the row, logits)
    real_run = engine.runner.run

    def run(batch, argmax_only=None):  # every step's logits: none taken by the head's argmax
        result = real_run(batch)
        row = 0
        for req in result.sampling:
            drafts = list(req.draft_token_ids)
            for j in range(len(drafts) + 1):
                computed.append((req.num_tokens - 1 + j, drafts[:j], result.logits[row + j].clone()))
            row += len(drafts) + 1
        return result

    engine.runner.run = run
    engine.add_request(EngineRequest("r", prompt, params))
    output = []
    while engine.has_work:
        for out in engine.step():
            output += out.token_ids
    rows = {}
    for position, drafts, logits in computed:
        first = position - len(drafts) + 1 - len(prompt)  # where the drafts would sit in the output
        if drafts == output[first : first + len(drafts)]:
            assert position not in rows
            rows[position] = (len(drafts), logits)
    return output, rows


PROMPTS = {
    "repeating": [2] + [3 + (i * 5) % 13 for i in range(40)],  # drafts hold
    "free": [2] + [(3 + 7 * i * i) % 60 + 3 for i in range(12)],  # drafts only from what the model repeats
    "long": [2] + [3 + (i * 7) % 29 for i in range(58)],  # contexts cross a decode bucket (64) mid-verification
}


@pytest.mark.parametrize("prompt", PROMPTS.values(), ids=PROMPTS.keys())
def test_every_verified_row_is_bit_for_bit_a_decode_step(gguf_model, prompt):
    assert computes_lone_rows_exactly(gguf_model.model)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    plain_output, plain = logits_by_position(engine_for(gguf_model, "off"), prompt, params)
    spec_engine = engine_for(gguf_model, "ngram")
    output, verified = logits_by_position(spec_engine, prompt, params)
    assert output == plain_output
    assert verified.keys() == plain.keys()
    assert sum(drafts > 0 for drafts, _ in verified.values()) > 0  # rows behind an accepted draft were compared
    for position, (_, logits) in verified.items():
        assert torch.equal(logits, plain[position][1]), f"position {position}"
    assert spec_engine.speculator.drafted_total > 0


def test_auto_speculates_where_verification_is_exact(gguf_model, tiny_model_dir):
    assert engine_for(gguf_model, "auto").speculator.enabled
    dense = load_model(str(tiny_model_dir), dtype="bfloat16")  # dense bf16 projections: not exact
    assert not computes_lone_rows_exactly(dense.model)
    assert not Engine(dense, EngineConfig(speculative="auto", ctx_size=64, parallel=1)).speculator.enabled
    assert Engine(dense, EngineConfig(speculative="ngram", ctx_size=64, parallel=1)).speculator.enabled


def test_a_verification_beside_a_prefill_keeps_its_rows_exact(gguf_model):
    """A second request's prompt is prefilled (dense, in chunks) in steps where the first
    verifies drafts: the first one's tokens still come out as when it decodes alone."""
    prompt = PROMPTS["repeating"]
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    alone, _ = logits_by_position(engine_for(gguf_model, "off"), prompt, params)
    engine = Engine(gguf_model, EngineConfig(speculative="ngram", ctx_size=256, parallel=2, block_size=16,
                                             spec_tokens=5, spec_max_batch=2, max_batched_tokens=24))
    engine.speculator.costs = StepCosts(row_cost=0.0, measure=False)
    mixed_steps = 0
    real_run = engine.runner.run

    def run(batch, argmax_only=None):
        nonlocal mixed_steps
        shapes = {req.request_id: (n, len(req.draft_token_ids)) for req, n in zip(batch.requests, batch.num_new_tokens)}
        mixed_steps += shapes.get("first", (0, 0))[1] > 0 and shapes.get("second", (0, 0))[0] > 1
        return real_run(batch, argmax_only)

    engine.runner.run = run
    engine.add_request(EngineRequest("first", prompt, params))
    outputs = collections.defaultdict(list)
    started = False
    while engine.has_work:
        for out in engine.step():
            outputs[out.request_id] += out.token_ids
        if not started and len(outputs["first"]) >= 3:
            engine.add_request(EngineRequest("second", PROMPTS["long"] * 2, SamplingParams(max_tokens=2)))
            started = True
    assert mixed_steps > 0
    assert outputs["first"] == alone


BUNDLED_PROMPTS = [
    "def add(a, b):\n    return a + b\n\n\nThe same function renamed to plus:\n\ndef plus(a, b):\n",
    "The river rises in the hills and flows west to the sea. Quote the text: \"The river",
    "Write a short story about a fox who learns to sail.\n\nStory: The fox had never seen the sea",  # free-running
]


@pytest.fixture(scope="module")
def bundled():
    return load_model()  # the bundled Gemma 3 GGUF, on its own blocks


# The tiny models above cover every path; of the bundled model's prompts the default run keeps one.
@pytest.mark.parametrize("text", [pytest.param(BUNDLED_PROMPTS[0], id="edit"),
                                  pytest.param(BUNDLED_PROMPTS[1], id="quote", marks=pytest.mark.slow),
                                  pytest.param(BUNDLED_PROMPTS[2], id="story", marks=pytest.mark.slow)])
def test_the_bundled_model_verifies_bit_for_bit(bundled, text):
    assert computes_lone_rows_exactly(bundled.model)
    prompt = bundled.tokenizer.encode(text)
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    plain_output, plain = logits_by_position(engine_for(bundled, "off"), prompt, params)
    output, verified = logits_by_position(engine_for(bundled, "auto"), prompt, params)
    assert output == plain_output
    assert verified.keys() == plain.keys()
    for position, (_, logits) in verified.items():
        assert torch.equal(logits, plain[position][1]), f"position {position}"
