"""An encoder's projections: the weight reordered once for oneDNN where it
runs the dtype on CPU, the product the plain one's to float rounding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from inferd.arch.bert import build_encoder
from inferd.arch.encoder_projection import Projection, can_pack
from inferd.models.encoder_config import EncoderConfig

from tiny_encoders import tiny_encoder

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not can_pack(torch.float32, CPU), reason="this torch has no oneDNN")


def _projection(dtype: torch.dtype, n_in: int = 24, n_out: int = 40) -> Projection:
    g = torch.Generator().manual_seed(0)
    proj = Projection(n_in, n_out)
    proj.weight = torch.nn.Parameter(torch.randn(n_out, n_in, generator=g).to(dtype), requires_grad=False)
    proj.bias = torch.nn.Parameter(torch.randn(n_out, generator=g).to(dtype), requires_grad=False)
    return proj


@needs_onednn
@pytest.mark.parametrize("rows", [1, 37, 1030])
def test_a_packed_float32_projection_gives_the_plain_product(rows):
    proj = _projection(torch.float32)
    weight, bias = proj.weight.clone(), proj.bias.clone()
    x = torch.randn(rows, 24, generator=torch.Generator().manual_seed(1))
    residual = torch.randn(rows, 40, generator=torch.Generator().manual_seed(2))
    proj.pack()
    assert proj.packed is not None and proj.weight is None  # no second copy of the weight is kept
    with torch.inference_mode():
        torch.testing.assert_close(proj(x), F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(proj.add_onto(residual, x), residual + F.linear(x, weight, bias),
                                   atol=1e-5, rtol=1e-5)


def test_a_dtype_onednn_does_not_run_stays_plain():
    assert not can_pack(torch.float64, CPU) and not can_pack(torch.float32, torch.device("meta"))
    proj = _projection(torch.float64)
    proj.pack()
    assert proj.packed is None and proj.weight is not None
    x = torch.randn(5, 24, dtype=torch.float64)
    torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))


def test_a_weight_onednn_cannot_reorder_stays_plain(monkeypatch):
    from inferd.arch import encoder_projection

    def refuse(weight):
        raise RuntimeError("no reorder for this layout")

    monkeypatch.setattr(encoder_projection, "_reorder", refuse)
    proj = _projection(torch.float32)
    proj.pack()
    assert proj.packed is None and proj.weight is not None
    x = torch.randn(3, 24)
    torch.testing.assert_close(proj(x), F.linear(x, proj.weight, proj.bias))


@needs_onednn
def test_loading_an_encoder_packs_every_projection():
    ref = tiny_encoder("roformer")  # its embedding projection too
    model = build_encoder(EncoderConfig.from_hf(dict(ref.config.to_dict(), architectures=["RoFormerModel"])))
    model.load_weights(ref.state_dict().items(), torch.float32, CPU)
    projections = [m for m in model.modules() if isinstance(m, Projection)]
    assert len(projections) == 1 + 4 * ref.config.num_hidden_layers
    assert all(p.packed is not None and p.weight is None for p in projections)
    # The model's size (what a memory budget counts) still holds every weight, once.
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    assert size == sum(t.numel() * t.element_size() for name, t in ref.state_dict().items()
                       if "embed_positions" not in name)
