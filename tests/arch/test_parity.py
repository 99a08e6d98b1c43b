"""Logits parity with the reference implementation (transformers) on tiny
random-weight models of every architecture, through inferd's own paged path:
a cold prefill, a chunk over a cached prefix, then single-token decodes.

Tolerance: float32 end to end, max |diff| <= 1e-4 on logits of magnitude ~1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
import torch
import transformers
from inferd.arch import build_model
from inferd.engine.runner import ModelRunner
from inferd.engine.scheduler import ScheduledBatch
from inferd.models.config import ModelConfig

COMMON = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

CASES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, model_type="llama", rope_theta=10000.0)),
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})),
    "llama-linear-rope": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama-yarn-rope": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})),
    "mistral-window": ("MistralConfig", "MistralForCausalLM", dict(COMMON, sliding_window=6)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(COMMON, head_dim=32)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        COMMON, head_dim=32, sliding_window=6, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_theta=1e6, rope_local_base_freq=1e4)),
}


_SEQ_IDS = itertools.count()


@dataclass(eq=False)
class Seq:
    """The slice of a Request the runner reads."""
    all_token_ids: list[int]
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    draft_token_ids: list[int] = field(default_factory=list)
    request_id: str = field(default_factory=lambda: f"seq-{next(_SEQ_IDS)}")

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.all_token_ids

    @property
    def output_token_ids(self) -> list[int]:
        return []


def _reference(case: str):
    cfg_cls, model_cls, kwargs = CASES[case]
    config = getattr(transformers, cfg_cls)(**kwargs)
    torch.manual_seed(0)
    ref = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # random norm weights so the Gemma (1 + w) form is exercised
        for name, p in ref.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3) if "gemma" in cfg_cls.lower() else p.uniform_(0.5, 1.5)
    return config, ref


def _inferd(config, ref):
    hf = config.to_dict()
    hf.setdefault("model_type", config.model_type)
    cfg = ModelConfig.from_hf(hf)
    model = build_model(cfg)
    model.load_weights(ref.state_dict().items(), torch.float32, torch.device("cpu"))
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_reference_through_paged_path(case):
    config, ref = _reference(case)
    model = _inferd(config, ref)
    tokens = torch.randint(0, 96, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        expected = ref(torch.tensor([tokens])).logits[0].float()

    runner = ModelRunner(model, num_blocks=16, block_size=4, dtype=torch.float32, device=torch.device("cpu"),
                         kv_dtype=torch.float32)  # the float32 arithmetic itself, not the bf16 cache CPU engines keep
    seq = Seq(all_token_ids=tokens[:12], block_table=[3, 7, 1])
    got = runner.run(ScheduledBatch([seq], [12])).logits  # cold prefill, 12 tokens
    torch.testing.assert_close(got[0], expected[11], atol=1e-4, rtol=1e-4)
    seq.num_computed_tokens = 12
    seq.all_token_ids = tokens[:17]
    seq.block_table += [0, 9]
    got = runner.run(ScheduledBatch([seq], [5])).logits  # chunk over a cached prefix
    torch.testing.assert_close(got[0], expected[16], atol=1e-4, rtol=1e-4)
    seq.num_computed_tokens = 17
    for i in range(17, 20):  # decodes
        seq.all_token_ids = tokens[: i + 1]
        if len(seq.block_table) * 4 <= i:
            seq.block_table.append(12)
        got = runner.run(ScheduledBatch([seq], [1])).logits
        torch.testing.assert_close(got[0], expected[i], atol=1e-4, rtol=1e-4)
        seq.num_computed_tokens = i + 1


def test_batched_decode_matches_single_rows():
    """Decode rows of different lengths in one call give each row's own logits."""
    config, ref = _reference("gemma3")
    model = _inferd(config, ref)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 96, (n,), generator=gen).tolist() for n in (3, 9, 14)]
    with torch.no_grad():
        expected = [ref(torch.tensor([p])).logits[0, -1] for p in prompts]
    runner = ModelRunner(model, num_blocks=16, block_size=4, dtype=torch.float32, device=torch.device("cpu"),
                         kv_dtype=torch.float32)  # the float32 arithmetic itself, not the bf16 cache CPU engines keep
    seqs, next_block = [], 0
    for p in prompts:
        need = -(-len(p) // 4)
        seq = Seq(all_token_ids=p[:-1], block_table=list(range(next_block, next_block + need)))
        next_block += need
        runner.run(ScheduledBatch([seq], [len(p) - 1]))
        seq.num_computed_tokens = len(p) - 1
        seq.all_token_ids = p
        seqs.append(seq)
    got = runner.run(ScheduledBatch(seqs, [1, 1, 1])).logits
    for row, exp in zip(got, expected):
        torch.testing.assert_close(row, exp.float(), atol=1e-4, rtol=1e-4)
