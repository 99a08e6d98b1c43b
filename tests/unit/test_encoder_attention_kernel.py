"""The native attention of an encoder's short packed sequences against
torch's SDPA, which it replaces for sequences of up to MAX_LENGTH tokens."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from inferd.arch.bert import EncoderBatch, EncoderLayer
from inferd.kernels import encoder_attention, isa
from inferd.models.encoder_config import EncoderConfig

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def builds():
    """Every build this CPU can run (avx512, avx2, portable), by its own flags."""
    return [pytest.param(tuple(isa.march_flags(name)), marks=needs_compiler, id=name) for name in isa.runnable()]


def reference(qkv: torch.Tensor, lengths: list[int], heads: int, dim: int) -> torch.Tensor:
    """Each sequence alone through SDPA."""
    out, row = [], 0
    for n in lengths:
        q, k, v = qkv[row:row + n].view(n, 3, heads, dim).permute(1, 2, 0, 3)
        out.append(F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(n, heads * dim))
        row += n
    return torch.cat(out)


@pytest.mark.parametrize("build", builds())
@pytest.mark.parametrize(("heads", "dim"), [(12, 32), (4, 8), (3, 20), (2, 64)])
def test_matches_sdpa_for_every_sequence(build, heads, dim):
    lib = encoder_attention.library(build)
    assert lib is not None
    lengths = [1, 5, 5, 5, 7, 16, 16, 17, 33, 64]
    batch = EncoderBatch.of(lengths)
    qkv = torch.randn(sum(lengths), 3 * heads * dim, generator=torch.Generator().manual_seed(heads * dim)) * 2
    out = torch.full((sum(lengths) + 3, heads * dim), 7.0)  # rows past the sequences stay as they were
    encoder_attention.encoder_attention(qkv, heads, dim, torch.tensor(batch.groups), out, lib)
    torch.testing.assert_close(out[:sum(lengths)], reference(qkv, lengths, heads, dim), atol=2e-5, rtol=1e-5)
    assert (out[sum(lengths):] == 7.0).all()


@needs_compiler
def test_reads_rows_with_a_stride():
    """The fused projection's output may be a view whose rows lie further apart."""
    heads, dim, lengths = 4, 16, [9, 9, 12]
    wide = torch.randn(sum(lengths), 3 * heads * dim + 5)
    qkv = wide[:, :3 * heads * dim]
    out = torch.empty(sum(lengths), heads * dim)
    encoder_attention.encoder_attention(qkv, heads, dim, torch.tensor(EncoderBatch.of(lengths).groups), out)
    torch.testing.assert_close(out, reference(qkv.contiguous(), lengths, heads, dim), atol=2e-5, rtol=1e-5)


@needs_compiler
def test_refuses_what_it_cannot_compute():
    qkv, out = torch.randn(80, 3 * 64), torch.empty(80, 64)
    with pytest.raises(ValueError, match="sequences of 1 to 64 tokens"):
        encoder_attention.encoder_attention(qkv, 2, 32, torch.tensor([[0, 1, 65]]), out)
    with pytest.raises(ValueError, match="past the end"):
        encoder_attention.encoder_attention(qkv, 2, 32, torch.tensor([[0, 2, 41]]), out)
    with pytest.raises(ValueError, match=r"\[T, 3 \* heads \* head_dim\]"):
        encoder_attention.encoder_attention(qkv, 2, 16, torch.tensor([[0, 1, 8]]), out)


def test_supports_float32_rows_on_cpu_only():
    built = encoder_attention.library() is not None
    assert encoder_attention.supports(torch.zeros(4, 96)) is built
    assert not encoder_attention.supports(torch.zeros(4, 96, dtype=torch.bfloat16))
    assert not encoder_attention.supports(torch.zeros(96, 4).t())


@needs_compiler
def test_layer_runs_short_groups_natively_and_long_ones_through_sdpa(monkeypatch):
    cfg = EncoderConfig(model_type="bert", vocab_size=10, hidden_size=32, intermediate_size=64, num_layers=1,
                        num_heads=4, layer_norm_eps=1e-12, max_position_embeddings=128, type_vocab_size=2)
    layer = EncoderLayer(cfg)
    lengths = [3, 3, 20, 64, 65, 70]
    batch = EncoderBatch.of(lengths)
    qkv = torch.randn(sum(lengths) + 5, 96)
    calls = []
    native = encoder_attention.encoder_attention
    monkeypatch.setattr(encoder_attention, "encoder_attention",
                        lambda qkv, heads, dim, groups, out: calls.append(groups.tolist()) or native(qkv, heads, dim, groups, out))
    out = layer.attention(qkv, batch, torch.full((sum(lengths) + 5, 32), 7.0))
    assert calls == [[[0, 2, 3], [6, 1, 20], [26, 1, 64]]]
    torch.testing.assert_close(out[:sum(lengths)], reference(qkv, lengths, 4, 8), atol=2e-5, rtol=1e-5)
    assert (out[sum(lengths):] == 0).all()
