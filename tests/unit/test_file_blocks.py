"""`--weights gguf`: each projection and the LM head computed from the file's
own blocks, every part in its place (fused Q/K/V and gate/up, Llama's
re-ordered Q/K rows), dense where a format has no kernel or rows are many."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf_models import MODELS, hf_pieces, write_gguf
from torch import nn

from inferd.arch import build_model
from inferd.arch.file_blocks import (FORMATS, HEAD_DENSE_FROM, LAYER_DENSE_FROM, WIDE_HEAD_DENSE_FROM, blocks_label,
                                     head_dense_from, keeps_dense_copies, use_file_blocks)
from inferd.arch.quantize import uses_file_blocks
from inferd.arch.gguf_linear import GGUFLinear
from inferd.kernels import gguf_gemv, isa
from inferd.models.config import ModelConfig
from inferd.models.gguf import gguf_block_formats, iter_gguf_blocks, iter_gguf_tensors, read_gguf_config

# Mixed formats inside the fused projections, and one F16 matrix the kernels do not take.
QTYPES = {"self_attn.q_proj": Q.Q4_0, "self_attn.k_proj": Q.Q5_0, "self_attn.v_proj": Q.Q8_0,
          "self_attn.o_proj": Q.Q8_0, "mlp.gate_proj": Q.Q5_0, "mlp.up_proj": Q.Q8_0, "mlp.down_proj": Q.Q4_0}


def written(tmp_path, arch: str, dense_layer: bool = True):
    """The arch's tiny model as a GGUF of mixed blocks; with `dense_layer` one
    matrix is F16, which no kernel takes (so no decode step is one call)."""
    cfg, _, _, state = hf_pieces(arch)
    state = {name: tensor / 16 for name, tensor in state.items()}
    qtypes = {name: qtype for name in state for part, qtype in QTYPES.items() if f".{part}." in name}
    if dense_layer:
        qtypes["model.layers.1.mlp.down_proj.weight"] = Q.F16
    qtypes["model.embed_tokens.weight"] = Q.Q8_0
    if not cfg["tie_word_embeddings"]:
        qtypes["lm_head.weight"] = Q.Q8_0
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, arch, cfg, state, qtypes)
    return path


def loaded(path, blocks: bool, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    net = build_model(ModelConfig.from_hf(read_gguf_config(path)))
    net.load_weights(iter_gguf_tensors(path, dtype), dtype, torch.device("cpu"))
    if blocks:
        raws = {name: raw for name, _, raw in iter_gguf_blocks(path, FORMATS)}
        use_file_blocks(net, gguf_block_formats(path, FORMATS), raws, dtype)
    return net


def quantized(x: torch.Tensor) -> torch.Tensor:
    """x as the kernels see it: int8 per group of 32, in their float32 steps (see test_gguf_gemv)."""
    v = x.float().reshape(x.shape[0], -1, 32)
    d = v.abs().amax(dim=2, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / torch.where(d > 0, d, 1), 0)
    return (torch.round(v * inv).double() * d.double()).reshape(x.shape)


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])
def test_every_quantized_projection_computes_the_files_values(tmp_path, arch):
    path = written(tmp_path, arch)
    dense = {name: tensor.double() for name, tensor in iter_gguf_tensors(path, torch.float32)}
    net = loaded(path, blocks=True)
    swapped = {name: module for name, module in net.named_modules()
               if isinstance(module, GGUFLinear) and name != "fast_head"}
    layers = MODELS[arch][0]["num_hidden_layers"]
    assert set(swapped) == {f"layers.{i}.{p}" for i in range(layers)
                            for p in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
                            } - {"layers.1.mlp.down_proj"}
    assert type(net.layers[1].mlp.down_proj) is nn.Linear  # F16: no kernel, stays dense
    assert swapped["layers.0.self_attn.qkv_proj"].formats == ["Q4_0", "Q5_0", "Q8_0"]
    assert net.lm_head is None and isinstance(net.fast_head, GGUFLinear)

    generator = torch.Generator().manual_seed(0)
    for name, layer in [*swapped.items(), ("head", net.fast_head)]:
        if name == "head":
            weight = dense["lm_head.weight" if "lm_head.weight" in dense else "model.embed_tokens.weight"]
        else:
            parent, proj = name.rsplit(".", 1)
            parts = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
            weight = torch.cat([dense[f"model.{parent}.{p}.weight"] for p in parts.get(proj, (proj,))])
        x = torch.randn(1, layer.in_features, generator=generator).to(torch.bfloat16)
        want = quantized(x) @ weight.T
        if layer.bias is not None:
            want += layer.bias.double()
        got = layer(x).double()
        bound = quantized(x).abs() @ weight.abs().T * 1e-2 + 1e-3  # bf16 outputs (the head's are float32)
        assert torch.all((got - want).abs() <= bound), name


@pytest.fixture
def full_rate_bf16(monkeypatch):
    """Pretend oneDNN's bf16 matrix products run at full rate (AMX tiles, AMD's AVX512-BF16), or not."""
    return lambda present: monkeypatch.setattr(isa, "fast_bf16_matmul", lambda flags=None, vendor=None: present)


def test_only_full_rate_bf16_and_the_portable_build_keep_dense_copies(full_rate_bf16, monkeypatch):
    for present, vector, want in ((True, True, {torch.bfloat16}), (False, True, set()),
                                  (True, False, {torch.bfloat16, torch.float32}),
                                  (False, False, {torch.bfloat16, torch.float32})):
        full_rate_bf16(present)
        monkeypatch.setattr(gguf_gemv, "vectorized", lambda: vector)
        assert {d for d in (torch.bfloat16, torch.float32) if keeps_dense_copies(d)} == want, (present, vector)
        assert {d for d in (torch.bfloat16, torch.float32)
                if not blocks_label(d).endswith("-blocks-only")} == want  # a cache entry of its own


def test_many_rows_use_the_dense_weights_where_full_rate_bf16_keeps_them(tmp_path, full_rate_bf16):
    full_rate_bf16(True)
    path = written(tmp_path, "gemma3")
    with_blocks, plain = loaded(path, blocks=True), loaded(path, blocks=False)
    x = torch.randn(max(LAYER_DENSE_FROM, head_dense_from()), 64).to(torch.bfloat16)
    assert torch.equal(with_blocks.layers[0].self_attn.o_proj(x[:, :64]), plain.layers[0].self_attn.o_proj(x[:, :64]))
    assert torch.equal(with_blocks.fast_head(x), nn.functional.linear(x, plain.embed_tokens.weight).float())


def test_the_head_reads_its_dense_copy_from_two_passes_beside_amx_four_elsewhere(monkeypatch):
    for amx, vector, want in ((True, True, HEAD_DENSE_FROM), (False, True, WIDE_HEAD_DENSE_FROM),
                              (False, False, HEAD_DENSE_FROM)):
        monkeypatch.setattr(isa, "amx_bf16", lambda flags=None: amx)
        monkeypatch.setattr(gguf_gemv, "vectorized", lambda: vector)
        assert head_dense_from() == want, (amx, vector)
    assert (HEAD_DENSE_FROM, WIDE_HEAD_DENSE_FROM) == (2 * gguf_gemv.MAX_ROWS + 1, 4 * gguf_gemv.MAX_ROWS + 1)


def test_the_structure_alone_takes_the_state_dict_of_a_loaded_model(tmp_path):
    path = written(tmp_path, "llama")
    net = loaded(path, blocks=True)
    empty = build_model(ModelConfig.from_hf(read_gguf_config(path)))
    use_file_blocks(empty, gguf_block_formats(path, FORMATS), None, torch.bfloat16)
    empty.load_state_dict(net.state_dict(), strict=True, assign=True)
    x = torch.randn(1, 128).to(torch.bfloat16)
    assert torch.equal(empty.layers[0].self_attn.qkv_proj(x), net.layers[0].self_attn.qkv_proj(x))
    assert np.array_equal(empty.fast_head.raw0.numpy(), net.fast_head.raw0.numpy())


def test_gguf_files_default_to_their_own_blocks_and_other_models_to_bf16(tmp_path, tiny_model_dir):
    path = written(tmp_path, "gemma3")
    cpu = torch.device("cpu")
    assert uses_file_blocks("auto", path, torch.bfloat16, cpu)
    assert not uses_file_blocks("auto", tiny_model_dir, torch.bfloat16, cpu)  # safetensors
    assert uses_file_blocks("auto", path, torch.float32, cpu)  # a CPU without native bf16
    assert not uses_file_blocks("auto", path, torch.float16, cpu)
    assert not uses_file_blocks("bf16", path, torch.bfloat16, cpu)
    with pytest.raises(ValueError, match="--weights gguf cannot be used: the model is not a GGUF file"):
        uses_file_blocks("gguf", tiny_model_dir, torch.bfloat16, cpu)
    with pytest.raises(ValueError, match="it computes with bf16 or float32 activations, not --dtype float16"):
        uses_file_blocks("gguf", path, torch.float16, cpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_without_full_rate_bf16_no_dense_copies_and_every_row_from_the_blocks(tmp_path, full_rate_bf16, dtype):
    """In float32 (no native bf16) and in bf16 without AMX nothing keeps a
    dense copy: decode rows and prefill chunks alike read the file's blocks,
    and a row's result is the one it gets alone."""
    if not gguf_gemv.vectorized():
        pytest.skip("the portable build keeps dense copies")
    full_rate_bf16(False)
    path = written(tmp_path, "gemma3")
    dense = {name: tensor.double() for name, tensor in iter_gguf_tensors(path, torch.float32)}
    net = loaded(path, blocks=True, dtype=dtype)
    layer = net.layers[0].self_attn.o_proj
    assert isinstance(layer, GGUFLinear) and layer.dense is None and layer.dense_from_rows is None
    assert net.fast_head.dense is None and net.fast_head.kernel_out_dtype == torch.float32
    assert not any(name.endswith("dense") for name, _ in net.named_buffers())
    weight = dense["model.layers.0.self_attn.o_proj.weight"]
    for count in (3, 2 * gguf_gemv.MAX_ROWS + 3):  # a decode step's rows; a prefill chunk's, with a last short pass
        x = torch.randn(count, layer.in_features, generator=torch.Generator().manual_seed(count)).to(dtype)
        got = layer(x)
        assert got.dtype == dtype
        bound = quantized(x).abs() @ weight.abs().T * (1e-5 if dtype == torch.float32 else 1e-2) + 1e-6
        assert torch.all((got.double() - quantized(x) @ weight.T).abs() <= bound)
        assert torch.equal(got, torch.cat([layer(row[None]) for row in x]))
    rows = torch.randn(12, net.fast_head.in_features, generator=torch.Generator().manual_seed(2)).to(dtype)
    head = dense["model.embed_tokens.weight"]
    assert torch.all((net.fast_head(rows).double() - quantized(rows) @ head.T).abs()
                     <= quantized(rows).abs() @ head.abs().T * 1e-5 + 1e-6)


GREEDY = """
import json, sys
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model
import inferd.arch.file_blocks as file_blocks

file_blocks.keeps_dense_copies = lambda dtype: False  # prompts through the kernels too, on every build
out = {}
for dtype in ("bfloat16", "float32"):
    engine = Engine(load_model(sys.argv[1], dtype=dtype), EngineConfig(parallel=3, ctx_size=256))
    for i, prompt in enumerate(([5, 9, 17, 3], [40, 2, 2, 7, 11, 60, 31], [8] * 40)):
        params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=0)
        engine.add_request(EngineRequest(f"{dtype}{i}", prompt, params))
        out[f"{dtype}{i}"] = []
    while engine.has_work:
        for delta in engine.step():
            out[delta.request_id] += [(t.token_id, t.logprob.hex()) for t in delta.logprobs or []]
    out[f"{dtype} one call"] = engine.runner.model._fused is not None
print(json.dumps(out))
"""


@pytest.mark.parametrize("one_call", [False, True], ids=["modules", "one-call"])
def test_greedy_tokens_are_the_same_on_every_build_this_cpu_can_run(tmp_path, one_call):
    """The kernels' sums reduce in one order on every build (AVX-512, AVX2,
    portable), so a greedy decode gives the same tokens on each, and the same
    bits: every token's logprob is equal to the last bit (decode rows, prefill
    chunks and a batch of three, in bf16 and float32), through the modules or
    with decode steps as one call (arch/fused_decode.py). No build keeps dense
    copies here, which would compute prompts on AMX in one and not another."""
    path = written(tmp_path, "gemma3", dense_layer=not one_call)
    results = {}
    for build in isa.runnable():
        done = subprocess.run([sys.executable, "-c", GREEDY, str(path)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "INFERD_ISA": build})
        assert done.returncode == 0, done.stderr[-3000:]
        results[build] = json.loads(done.stdout.strip().splitlines()[-1])
    for run in results.values():  # the decode steps took the path this case names, on every build
        assert run.pop("bfloat16 one call") == run.pop("float32 one call") == one_call
    first = next(iter(results.values()))
    assert all(len(steps) == 24 for steps in first.values())
    for build, run in results.items():
        assert {r: [t for t, _ in steps] for r, steps in run.items()} == \
            {r: [t for t, _ in steps] for r, steps in first.items()}, f"{build} decodes other tokens"
        assert run == first, f"{build} computes other logprobs"
