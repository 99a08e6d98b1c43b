"""Decode steps' layers as one native call (arch/fused_decode.py): taken where
every projection holds the file's blocks and the step only decodes, and then
the same bits as the modules' path, in bf16 and in float32."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_models import hf_pieces, write_gguf

from inferd.arch.file_blocks import LAYER_DENSE_FROM
from inferd.arch.fused_decode import FusedDecode, rows_limit
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.kernels import decode_layers, gguf_gemv, isa
from inferd.models.loader import load_model

# Mixed formats inside the fused projections, every one with a kernel.
QTYPES = {"self_attn.q_proj": Q.Q4_0, "self_attn.k_proj": Q.Q5_0, "self_attn.v_proj": Q.Q8_0,
          "self_attn.o_proj": Q.Q8_0, "mlp.gate_proj": Q.Q5_0, "mlp.up_proj": Q.Q8_0, "mlp.down_proj": Q.Q4_0}
PROMPTS = ([5, 9, 17, 3], [40, 2, 2, 7, 11, 60, 31], [8] * 40)  # the last outgrows Gemma's 16-token window

pytestmark = pytest.mark.skipif(decode_layers.kernels() is None, reason="needs a C compiler for the native kernels")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fused")
    paths = {}
    for arch in ("llama", "qwen2", "qwen3", "gemma3"):  # plain, QKV biases, QK-norm, four norms and windows
        cfg, _, _, state = hf_pieces(arch)
        state = {name: tensor / 16 for name, tensor in state.items()}
        qtypes = {name: qtype for name in state for part, qtype in QTYPES.items() if f".{part}." in name}
        qtypes["model.embed_tokens.weight"] = Q.Q8_0
        paths[arch] = folder / f"{arch}.gguf"
        write_gguf(paths[arch], arch, cfg, state, qtypes)
    return paths


def decode(loaded, fuse: bool, monkeypatch, speculative: str = "off") -> tuple[dict, int]:
    """Every request's (token, logprob bits) and how many steps took the one call."""
    calls = []
    run = decode_layers.run
    monkeypatch.setattr(decode_layers, "run", lambda *args: calls.append(args[2].shape[0]) or run(*args))
    loaded.model.fuse_decode = fuse
    engine = Engine(loaded, EngineConfig(parallel=3, ctx_size=256, speculative=speculative))
    out = {}
    for i, prompt in enumerate(PROMPTS):
        params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=0)
        engine.add_request(EngineRequest(f"r{i}", list(prompt), params))
        out[f"r{i}"] = []
    while engine.has_work:
        for delta in engine.step():
            out[delta.request_id] += [(t.token_id, t.logprob.hex()) for t in delta.logprobs or []]
    return out, len(calls)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_the_one_call_gives_the_modules_bits(files, arch, monkeypatch):
    loaded = load_model(str(files[arch]), dtype="bfloat16")
    fused, steps = decode(loaded, True, monkeypatch)
    plain, none = decode(loaded, False, monkeypatch)
    assert none == 0 and steps >= 20  # every step after the prompts' is a decode step
    assert all(len(tokens) == 24 for tokens in fused.values())
    assert fused == plain


def test_speculative_verification_rows_take_it_too(files, monkeypatch):
    loaded = load_model(str(files["gemma3"]), dtype="bfloat16")
    fused, steps = decode(loaded, True, monkeypatch, speculative="ngram")
    plain, _ = decode(loaded, False, monkeypatch, speculative="ngram")
    assert steps > 0 and fused == plain


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_float32_engines_take_it_with_the_same_bits(files, arch, monkeypatch):
    """float32 activations beside the bf16 KV cache: queries rounded for decode attention, as the modules do."""
    loaded = load_model(str(files[arch]), dtype="float32")
    fused, steps = decode(loaded, True, monkeypatch)
    plain, _ = decode(loaded, False, monkeypatch)
    assert steps >= 20 and fused == plain


def test_dense_models_keep_the_modules(tiny_model_dir):
    dense = load_model(str(tiny_model_dir), dtype="bfloat16")
    assert FusedDecode.build(dense.model) is None  # no projection holds a file's blocks


def test_wide_decode_steps_take_it_with_the_modules_bits(files, monkeypatch):
    """More decode rows than a pass of the kernel: still the one call, all of them, as the modules compute them."""
    if not gguf_gemv.vectorized():
        pytest.skip("a portable build keeps float32 copies for wide steps")
    monkeypatch.setattr(isa, "fast_bf16_matmul", lambda flags=None, vendor=None: False)  # the modules keep the tiles
    loaded = load_model(str(files["gemma3"]), dtype="bfloat16")
    assert FusedDecode.build(loaded.model).max_rows is None
    width = gguf_gemv.MAX_ROWS + 3
    runs = {}
    for fuse in (True, False):
        calls = []
        run = decode_layers.run
        monkeypatch.setattr(decode_layers, "run", lambda *args: calls.append(args[2].shape[0]) or run(*args))
        loaded.model.fuse_decode = fuse
        engine = Engine(loaded, EngineConfig(parallel=width, ctx_size=256, speculative="off"))
        params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=0)
        for i in range(width):
            engine.add_request(EngineRequest(f"r{i}", [5, 9, 17, 3 + i], params))
        out = {f"r{i}": [] for i in range(width)}
        while engine.has_work:
            for delta in engine.step():
                out[delta.request_id] += [(t.token_id, t.logprob.hex()) for t in delta.logprobs or []]
        monkeypatch.setattr(decode_layers, "run", run)
        runs[fuse] = out, calls
    (fused, calls), (plain, none) = runs[True], runs[False]
    assert none == [] and calls.count(width) == 11  # every decode step, all its rows
    assert fused == plain


@pytest.mark.parametrize("keeps, vectorized, amx, want", [
    (False, True, True, None),  # no dense copies: any width
    (True, True, False, None),  # Zen 4's AVX512-BF16 copies lose to the tiles at any width
    (True, True, True, 24),  # AMX's catch up by 32 rows
    (True, False, False, 8),  # a portable build's float32 copies beside its scalar kernel
])
def test_the_one_calls_width_by_cpu(monkeypatch, keeps, vectorized, amx, want):
    monkeypatch.setattr(gguf_gemv, "vectorized", lambda: vectorized)
    monkeypatch.setattr(isa, "amx_bf16", lambda flags=None: amx)
    assert rows_limit(keeps) == want


def test_a_zen4_like_cpu_takes_wide_decode_steps_beside_dense_copies(files, monkeypatch):
    if not gguf_gemv.vectorized():
        pytest.skip("a portable build keeps float32 copies for wide steps")
    monkeypatch.setattr(isa, "fast_bf16_matmul", lambda flags=None, vendor=None: True)  # bf16 keeps dense copies
    monkeypatch.setattr(isa, "amx_bf16", lambda flags=None: False)
    loaded = load_model(str(files["gemma3"]), dtype="bfloat16")
    assert loaded.model.layers[0].mlp.down_proj.dense_from_rows == LAYER_DENSE_FROM
    assert FusedDecode.build(loaded.model).max_rows is None


def test_steps_with_a_prefill_or_too_many_rows_keep_the_modules(files, monkeypatch):
    monkeypatch.setattr(isa, "fast_bf16_matmul", lambda flags=None, vendor=None: True)  # bf16 keeps dense copies
    monkeypatch.setattr(isa, "amx_bf16", lambda flags=None: True)  # whose dense copies catch up by 32 rows
    loaded = load_model(str(files["gemma3"]), dtype="bfloat16")
    plan = FusedDecode.build(loaded.model)
    want = 3 * gguf_gemv.MAX_ROWS if gguf_gemv.vectorized() else gguf_gemv.MAX_ROWS  # passes of the kernel
    assert plan is not None and plan.max_rows == want
    # The modules go dense from fewer rows: a prompt's rows come out alike alone or beside another's.
    assert {p.dense_from_rows for layer in loaded.model.layers
            for p in (layer.self_attn.qkv_proj, layer.mlp.down_proj)} == {LAYER_DENSE_FROM}
    calls = []
    run = decode_layers.run
    monkeypatch.setattr(decode_layers, "run", lambda *args: calls.append(args[2].shape[0]) or run(*args))
    engine = Engine(loaded, EngineConfig(parallel=plan.max_rows + 1, ctx_size=256, speculative="off"))
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    for i in range(plan.max_rows + 1):  # a prompt joins each step: each step has a prefill
        engine.add_request(EngineRequest(f"r{i}", [5, 9, 17, 3 + i], params))
        engine.step()
    assert calls == []
    engine.step()  # one decode row more than the one call takes
    assert calls == []
    engine.abort("r0")
    engine.step()
    assert calls == [plan.max_rows]
