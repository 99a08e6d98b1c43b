"""A batch whose padding to a recurring row count would waste many rows runs
as two forwards: the sequences that fill the recurring size below, then the
rest; each sequence's vector is the one it gets alone."""

from __future__ import annotations

import numpy as np
import torch
from inferd.arch.bert import build_encoder
from inferd.engine.embedding.forward import EncoderForward, padded_rows, split_point
from inferd.engine.embedding.model import PooledInput
from inferd.models.encoder_config import EncoderConfig

from tiny_encoders import tiny_encoder

CPU = torch.device("cpu")


def test_split_point_fills_the_recurring_size_below():
    assert padded_rows(3675) == 3840
    lengths = [11] * 333 + [12]
    assert split_point(lengths) == 325  # 3,575 rows padded to 3,584, then 100 padded to 112
    assert split_point([16] * 227) == 224  # 3,584 rows exactly, then 48
    assert split_point([11] * 372) == 372  # 4,092 rows: 4 of padding
    assert split_point([18] * 28 + [19] * 3) == 31  # 561 rows padded to 576: too few saved
    assert split_point([12]) == 1 and split_point([]) == 0
    assert split_point([300, 300, 300, 300, 5]) == 5  # below is 1,024 rows: no prefix saves 32


def test_a_split_batch_gives_each_input_its_vector_alone():
    ref = tiny_encoder("bert", seed=6)
    model = build_encoder(EncoderConfig.from_hf(dict(ref.config.to_dict(), architectures=["BertModel"])))
    model.load_weights(ref.state_dict().items(), torch.float32, CPU)
    forward = EncoderForward(model.eval(), "mean", True, CPU)
    g = torch.Generator().manual_seed(9)
    inputs = [PooledInput(torch.randint(5, 1000, (10 + i % 3,), generator=g).tolist()) for i in range(94)]
    lengths = sorted(map(len, inputs))
    assert sum(lengths) == 1033 and split_point(lengths) == 93  # 1,021 rows padded to 1,024, then 12 to 16, not 1,280
    calls = []
    inner = forward._forward
    forward._forward = lambda items: calls.append(len(items)) or inner(items)
    together = np.stack(forward(inputs))
    assert len(calls) == 2 and sum(calls) == len(inputs)
    alone = np.stack([forward([item])[0] for item in inputs])
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
