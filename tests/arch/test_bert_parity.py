"""inferd's encoders against transformers on tiny random-weight models, and
a chat model's pooled hidden states against transformers' hidden states.

Tolerance: float32 end to end; hidden states and logits within 1e-4 (their
magnitudes are ~1), pooled vectors' cosine >= 0.99999."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from inferd.arch.bert import build_encoder
from inferd.engine.embedding.forward import DecoderForward, EncoderForward
from inferd.engine.embedding.model import PooledInput
from inferd.models.encoder_config import EncoderConfig, model_kind
from inferd.models.loader import load_model

from tiny_encoders import tiny_encoder

CPU = torch.device("cpu")
# Lengths differ, so the batch pads and masks; one input alone takes the unpadded path.
LENGTHS = (9, 3, 17, 1, 12)


def _hf(ref) -> dict:
    return dict(ref.config.to_dict(), architectures=[type(ref).__name__])  # as save_pretrained writes it


def _inferd(ref):
    hf = _hf(ref)
    cfg = EncoderConfig.from_hf(hf)
    model = build_encoder(cfg)
    model.load_weights(ref.state_dict().items(), torch.float32, CPU)
    return cfg, model.eval()


def _batch(vocab: int, seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, vocab, (n,), generator=g).tolist() for n in LENGTHS]


def _padded(seqs, types=None):
    width = max(map(len, seqs))
    ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    type_ids = None if types is None else torch.tensor([t + [0] * (width - len(t)) for t in types])
    return ids, mask, type_ids


@pytest.mark.parametrize("kind,extra", [("bert", {}), ("roberta", {}), ("roformer", {}),
                                        ("roformer", {"rotary_value": True})],
                         ids=["bert", "roberta", "roformer", "roformer-rotary-value"])
def test_encoder_hidden_states_match_transformers(kind, extra):
    ref = tiny_encoder(kind, **extra)
    cfg, model = _inferd(ref)
    assert model_kind(_hf(ref)) == "embed"
    seqs = _batch(cfg.vocab_size)
    ids, mask, _ = _padded(seqs)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    forward = EncoderForward(model, "mean", True, CPU)
    with torch.inference_mode():
        for mode in ("mean", "cls"):
            forward.mode = mode
            got = torch.tensor(np.stack(forward([PooledInput(s) for s in seqs])))
            rows = [expected[i, :n].mean(0) if mode == "mean" else expected[i, 0] for i, n in enumerate(LENGTHS)]
            cosine = F.cosine_similarity(got, F.normalize(torch.stack(rows), dim=-1))
            assert cosine.min() >= 0.99999, (mode, cosine)
        forward.mode = "none"
        per_token = forward([PooledInput(s) for s in seqs])
    for i, n in enumerate(LENGTHS):
        assert per_token[i].shape == (n, cfg.hidden_size)
        torch.testing.assert_close(torch.tensor(per_token[i]), expected[i, :n], atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind,labels", [("bert", 1), ("roberta", 1), ("bert", 2), ("roformer", 1), ("roformer", 2)])
def test_cross_encoder_scores_match_transformers(kind, labels):
    ref = tiny_encoder(kind, labels=labels)
    cfg, model = _inferd(ref)
    assert model_kind(_hf(ref)) == "rerank" and cfg.num_labels == labels
    seqs = _batch(cfg.vocab_size, seed=5)
    types = [[0] * (n // 2) + [1] * (n - n // 2) for n in LENGTHS] if kind != "roberta" else None
    ids, mask, type_ids = _padded(seqs, types)
    with torch.no_grad():
        logits = ref(input_ids=ids, attention_mask=mask, token_type_ids=type_ids).logits
    expected = torch.sigmoid(logits[:, 0]) if labels == 1 else torch.softmax(logits, -1)[:, -1]
    inputs = [PooledInput(s, types[i] if types else None) for i, s in enumerate(seqs)]
    got = torch.tensor(EncoderForward(model, "cls", False, CPU)(inputs))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert got.std() > 1e-3  # the scores tell the inputs apart


@pytest.mark.parametrize("mode", ["mean", "last"])
@pytest.mark.parametrize("folder", ["tiny_llama_dir", "tiny_model_dir"])  # Gemma 3: sliding windows of 8
def test_decoder_pooling_matches_transformers_hidden_states(request, folder, mode):
    import transformers

    path = request.getfixturevalue(folder)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    loaded = load_model(str(path), dtype="float32", device="cpu", weights="bf16")
    forward = DecoderForward(loaded.model, mode, True, CPU, torch.float32)
    seqs = _batch(200, seed=7)
    got = torch.tensor(np.stack(forward([PooledInput(s) for s in seqs])))
    for i, seq in enumerate(seqs):
        with torch.no_grad():
            hidden = ref(torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
        want = hidden.mean(0) if mode == "mean" else hidden[-1]
        assert F.cosine_similarity(got[i], F.normalize(want, dim=0), dim=0) >= 0.99999


@pytest.mark.parametrize("labels", [0, 1])
def test_a_saved_roformer_folder_loads_and_matches_transformers(tmp_path, labels):
    """save_pretrained's names (a `roformer.` prefix under a head, the sinusoid
    table) load, and the folder's vectors or scores are transformers'."""
    from inferd.models.encoder_loader import load_encoder

    from tiny_encoders import write_tiny_encoder

    folder = write_tiny_encoder(tmp_path / "roformer", kind="roformer", labels=labels, seed=2)
    loaded = load_encoder("tiny-roformer", folder, torch.float32, CPU)
    assert loaded.kind == ("rerank" if labels else "embed") and loaded.config.rotary
    assert loaded.max_tokens == 64  # the sinusoid table's length
    ref = tiny_encoder("roformer", labels=labels, seed=2)
    seqs = _batch(ref.config.vocab_size, seed=11)
    ids, mask, _ = _padded(seqs)
    forward = EncoderForward(loaded.model, loaded.pooling.mode, loaded.pooling.normalize, CPU)
    got = torch.tensor(np.stack(forward([PooledInput(s) for s in seqs])), dtype=torch.float32)
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask)
    if labels:
        torch.testing.assert_close(got, torch.sigmoid(out.logits[:, 0]), atol=1e-5, rtol=0)
    else:
        means = torch.stack([out.last_hidden_state[i, :n].mean(0) for i, n in enumerate(LENGTHS)])
        assert F.cosine_similarity(got, F.normalize(means, dim=-1)).min() >= 0.99999
