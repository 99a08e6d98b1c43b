"""Weight-only quantization: the kernels' conventions, dense dispatch, the
--weights schemes, and the disk cache of quantized weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from inferd.arch.attention import AttentionMetadata, ContextView, PrefillSpan
from inferd.arch.packed_linear import CHUNK_ROWS, PackedLinear, can_pack, padded_rows
from inferd.arch.quantize import SCHEMES, resolve_weights
from inferd.arch.quantized_linear import INT4_GROUP, QuantizedLinear
from inferd.kernels import quant_gemv
from inferd.models import loader, weight_cache
from inferd.models.loader import load_model
from tests.tiny_models import write_tiny_model

BF16 = torch.bfloat16
CPU = torch.device("cpu")


def on_int8_grid(n: int, k: int) -> torch.Tensor:
    """Weights that int8 with per-row power-of-two scales represents exactly."""
    q = torch.randint(-127, 128, (n, k))
    q[:, 0] = 127  # every row spans the full range, so its scale is exactly 2^-e
    scales = 2.0 ** -torch.randint(4, 9, (n, 1))
    return q * scales


def on_int4_grid(n: int, k: int) -> torch.Tensor:
    """Weights that int4 with power-of-two scales and zeros represents exactly."""
    q = torch.randint(0, 16, (n, k // INT4_GROUP, INT4_GROUP))
    q[..., 0], q[..., 1] = 0, 15  # every group spans all 16 levels
    scales = 2.0 ** -torch.randint(4, 9, (n, k // INT4_GROUP, 1))
    lows = torch.randint(-8, 1, (n, k // INT4_GROUP, 1)) * scales
    return (q * scales + lows).reshape(n, k)


@pytest.mark.parametrize(("bits", "grid"), [(8, on_int8_grid), (4, on_int4_grid)])
def test_weights_on_the_grid_round_trip_exactly(bits, grid):
    torch.manual_seed(0)
    weight = grid(128, 64)
    layer = QuantizedLinear.from_weight(weight, None, bits, BF16)
    x = torch.eye(64, dtype=BF16)  # row i of x @ W.T is column i of W
    assert torch.equal(layer(x).float().T, weight)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_output_tracks_the_float_weight(bits):
    torch.manual_seed(0)
    weight, x = torch.randn(256, 128) * 0.05, torch.randn(5, 128, dtype=BF16)
    expected = x.float() @ weight.T
    error = (QuantizedLinear.from_weight(weight, None, bits, BF16)(x).float() - expected).norm() / expected.norm()
    assert error < (0.02 if bits == 8 else 0.12)


def test_bias_is_added_and_leading_dimensions_kept():
    torch.manual_seed(0)
    weight, bias = on_int8_grid(32, 64), torch.randn(32)
    layer = QuantizedLinear.from_weight(weight, bias, 8, torch.float32)
    x = torch.randn(2, 3, 64)
    assert layer(x).shape == (2, 3, 32)
    torch.testing.assert_close(layer(x), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_wide_inputs_use_the_dense_weight_and_narrow_ones_the_quantized():
    torch.manual_seed(0)
    weight = torch.randn(64, 64, dtype=BF16)
    layer = QuantizedLinear.from_weight(weight, None, 4, BF16, dense_from_rows=4)
    assert layer.dense.data_ptr() == weight.data_ptr()  # same dtype: shared, not copied
    wide, narrow = torch.randn(4, 64, dtype=BF16), torch.randn(3, 64, dtype=BF16)
    assert torch.equal(layer(wide), F.linear(wide, weight))
    assert not torch.equal(layer(narrow), F.linear(narrow, weight))
    assert torch.equal(layer(narrow), QuantizedLinear.from_weight(weight, None, 4, BF16)(narrow))


@pytest.mark.skipif(not can_pack(BF16, CPU), reason="this CPU's oneDNN runs no bf16 matmuls")
def test_packed_linear_is_linear_exactly():
    torch.manual_seed(0)
    weight, bias = torch.randn(96, 64, dtype=BF16), torch.randn(96, dtype=BF16)
    layer = PackedLinear(weight, bias)
    assert layer.state_dict() == {}  # an opaque layout: the weight cache keeps plain weights
    for shape in [(1, 64), (8, 64), (9, 64), (2, 300, 64)]:  # 9 rows run padded to 16, 600 as 512 + 96
        x = torch.randn(*shape, dtype=BF16)
        assert torch.equal(layer(x), F.linear(x, weight, bias))


def test_every_input_shares_40_matmul_row_counts():
    assert [padded_rows(rows) for rows in range(1, 9)] == list(range(1, 9))
    assert [padded_rows(rows) for rows in (9, 16, 17, 129, 256, 500)] == [16, 16, 32, 144, 256, 512]

    class Recording(PackedLinear):
        def __init__(self):
            torch.nn.Module.__init__(self)
            self.in_features, self.out_features, self.seen = 4, 2, set()

        def _product(self, x):
            self.seen.add(x.shape[0])
            return torch.arange(x.shape[0], dtype=torch.float32)[:, None].expand(-1, 2)

    layer = Recording()
    for rows in range(1, 1200):
        out = layer(torch.zeros(rows, 4))
        assert out.shape == (rows, 2) and torch.equal(out[:, 0] % CHUNK_ROWS, torch.arange(rows) % CHUNK_ROWS)
    assert len(layer.seen) == 40 and max(layer.seen) == CHUNK_ROWS


def test_bf16_models_pack_their_projections_and_head(tiny):
    loaded = load_model(str(tiny), "bfloat16", "cpu", "bf16")
    packs = can_pack(BF16, CPU)
    assert isinstance(loaded.model.fast_head, PackedLinear) == packs
    assert any(isinstance(m, PackedLinear) for m in loaded.model.modules()) == packs
    assert all(not isinstance(m, torch.nn.Linear) for m in loaded.model.modules()) == packs


def test_resolve_weights():
    assert resolve_weights("bf16", BF16, CPU) is None
    assert resolve_weights("mixed", BF16, CPU) == SCHEMES["mixed"]
    assert resolve_weights("int4", torch.float32, CPU) == SCHEMES["int4"]
    assert resolve_weights("bf16", BF16, torch.device("cuda")) is None
    with pytest.raises(ValueError, match="--weights int8 runs on CPU only; use --weights bf16 on cuda"):
        resolve_weights("int8", BF16, torch.device("cuda"))
    assert resolve_weights("auto", BF16, CPU) is None and resolve_weights("gguf", BF16, CPU) is None
    with pytest.raises(ValueError, match=r"--weights 'q3' is not one of: auto, gguf, bf16, mixed, int8, int4"):
        resolve_weights("q3", BF16, CPU)


def prefill_hidden(loaded, tokens: list[int]) -> torch.Tensor:
    cfg, n = loaded.config, len(tokens)
    caches = [(torch.zeros(n, cfg.num_kv_heads, cfg.head_dim, dtype=loaded.dtype),
               torch.zeros(n, cfg.num_kv_heads, cfg.head_dim, dtype=loaded.dtype)) for _ in range(cfg.num_layers)]
    meta = AttentionMetadata(slot_mapping=torch.arange(n), prefills=[PrefillSpan(0, n, True, ContextView(None, None))])
    with torch.inference_mode():
        return loaded.model(torch.tensor(tokens), torch.arange(n), caches, meta)


def prefill_logits(loaded, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model.compute_logits(prefill_hidden(loaded, tokens))


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return write_tiny_model(tmp_path / "tiny")


def kernel_layouts():
    """With inferd's kernels where they are built, and with torch's (kernels hidden)."""
    return [pytest.param(True, marks=pytest.mark.skipif(not quant_gemv.available(), reason="kernels not built here"),
                         id="tiled"), pytest.param(False, id="torch")]


@pytest.fixture
def kernels(request, monkeypatch):
    if not request.param:
        monkeypatch.setattr(quant_gemv, "available", lambda: False)
    return request.param


@pytest.mark.parametrize("kernels", kernel_layouts(), indirect=True)
@pytest.mark.parametrize("scheme", ["int8", "int4", "mixed"])
def test_quantized_model_follows_bf16(tiny, scheme, kernels):
    reference = load_model(str(tiny), "bfloat16", "cpu", "bf16")
    quantized = load_model(str(tiny), "bfloat16", "cpu", scheme)
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.model.modules())
    assert all(m.tiled == kernels for m in quantized.model.modules() if isinstance(m, QuantizedLinear))
    tokens = list(range(3, 40))
    want, got = prefill_logits(reference, tokens[:3]), prefill_logits(quantized, tokens[:3])
    assert (got - want).norm() / want.norm() < 0.15
    if scheme == "mixed":  # 37 rows: the layers' dense path, which is bf16 itself
        assert torch.equal(prefill_hidden(quantized, tokens), prefill_hidden(reference, tokens))
        # The head's too, except with the kernels: int4 at every width, so no dense copy.
        assert quantized.model.fast_head.dense_from_rows == (None if kernels else SCHEMES["mixed"].head_dense_from)
        if not kernels:
            assert torch.equal(prefill_logits(quantized, tokens), prefill_logits(reference, tokens))


@pytest.mark.parametrize("kernels", kernel_layouts(), indirect=True)
def test_second_load_reads_the_weight_cache(tiny, tmp_path, monkeypatch, kernels):
    real_tensors = loader._tensors
    first = load_model(str(tiny), "bfloat16", "cpu", "mixed")
    cached = list((tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors"))
    assert len(cached) == 1

    def no_dequantizing(*args, **kwargs):
        raise AssertionError("a warm load must not read the checkpoint")

    monkeypatch.setattr(loader, "_tensors", no_dequantizing)
    second = load_model(str(tiny), "bfloat16", "cpu", "mixed")
    head = second.model.fast_head
    if kernels:  # no dense head: the embedding is lookup-only, read from the cache's map
        assert head.dense is None and mapped_file(second.model.embed_tokens.weight) == str(cached[0])
    else:
        assert head.dense.data_ptr() == second.model.embed_tokens.weight.data_ptr()  # the tie survives
    tokens = [5, 9, 11]
    assert torch.equal(prefill_logits(first, tokens), prefill_logits(second, tokens))
    # Another scheme is another cache entry.
    monkeypatch.setattr(loader, "_tensors", real_tensors)
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    assert len(list((tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors"))) == 2


def test_cached_weights_are_aligned_for_the_kernels(tiny):
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    warm = load_model(str(tiny), "bfloat16", "cpu", "int8")
    kernel_weights = {n: t for n, t in warm.model.state_dict().items() if n != "embed_tokens.weight"}  # a lookup
    assert all(t.data_ptr() % 64 == 0 for t in kernel_weights.values())
    # The int8 kernel takes misaligned weights badly from 4 rows: 8 rows must work.
    assert prefill_logits(warm, list(range(3, 11))).isfinite().all()


def test_a_damaged_cache_is_rebuilt(tiny, tmp_path):
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    cache_file.write_bytes(b"not a safetensors file")
    again = load_model(str(tiny), "bfloat16", "cpu", "int8")
    assert prefill_logits(again, [5, 9]).isfinite().all()
    assert cache_file.stat().st_size > 1000  # rewritten


def test_cached_tensors_are_page_aligned_maps_of_the_cache(tiny, tmp_path):
    cold = load_model(str(tiny), "bfloat16", "cpu", "int8")
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    mapped = loader.load_cached_state(cache_file)
    saved = cold.model.state_dict()
    assert mapped.keys() == saved.keys()
    for name, tensor in mapped.items():
        assert mapped_file(tensor) == str(cache_file) and tensor.data_ptr() % 4096 == 0, name
        assert tensor.dtype == saved[name].dtype and torch.equal(tensor, saved[name]), name
    # Still a safetensors file that the reference reader takes (the padding entries fill the gaps).
    from safetensors.torch import load_file

    reference = load_file(cache_file)
    assert all(torch.equal(reference[name], tensor) for name, tensor in mapped.items() if name in reference)


def test_a_dropped_cached_tensor_unmaps_its_pages(tiny, tmp_path):
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    maps = lambda: sum(line.rstrip().endswith(str(cache_file)) for line in open("/proc/self/maps"))  # noqa: E731
    before = maps()
    state = loader.load_cached_state(cache_file)
    assert maps() > before  # one map per tensor (the kernel may merge neighbours in the listing)
    del state
    assert maps() == before


def test_a_cache_written_for_another_layout_is_rebuilt(tiny, tmp_path, caplog):
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    state = loader.load_cached_state(cache_file)
    state["fast_head.dense"] = torch.zeros(4, 4, dtype=BF16)  # a key this model does not have
    loader.store_state(cache_file, SimpleNamespace(state_dict=lambda: state))
    again = load_model(str(tiny), "bfloat16", "cpu", "int8")
    assert "does not fit the model" in caplog.text
    assert prefill_logits(again, [5, 9]).isfinite().all()
    assert "fast_head.dense" not in loader.load_cached_state(cache_file)  # rewritten


def mapped_file(tensor: torch.Tensor) -> str | None:
    """The file whose memory map holds `tensor`'s data, if any (not `[heap]` and the like:
    a small tensor allocated where malloc grows its heap)."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if low <= address < high:
                return fields[5] if len(fields) > 5 and fields[5].startswith("/") else None
    return None


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_a_lookup_only_embedding_is_read_from_the_cache_map(tiny, tmp_path, monkeypatch, scheme):
    cold = load_model(str(tiny), "bfloat16", "cpu", scheme)
    warm = load_model(str(tiny), "bfloat16", "cpu", scheme)
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    for loaded in (cold, warm):
        assert mapped_file(loaded.model.embed_tokens.weight) == str(cache_file)
    monkeypatch.setattr(loader, "map_embedding", lambda net, cache_file: None)
    real_load = loader.load_cached_state

    def read_into_memory(cache_file):
        copies = {}  # by tensor, so a tie stays one tensor
        return {name: copies.setdefault(id(t), t.clone()) for name, t in real_load(cache_file).items()}

    monkeypatch.setattr(loader, "load_cached_state", read_into_memory)
    in_memory = load_model(str(tiny), "bfloat16", "cpu", scheme)
    assert mapped_file(in_memory.model.embed_tokens.weight) != str(cache_file)
    tokens = [5, 9, 11, 3]
    assert torch.equal(prefill_logits(warm, tokens), prefill_logits(in_memory, tokens))
    assert torch.equal(prefill_logits(cold, tokens), prefill_logits(in_memory, tokens))


def test_an_embedding_shared_with_the_head_stays_one_tensor(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(quant_gemv, "available", lambda: False)  # the torch layout keeps a dense head
    cold = load_model(str(tiny), "bfloat16", "cpu", "mixed")
    assert mapped_file(cold.model.embed_tokens.weight) is None  # the head uses it whole: not remapped
    warm = load_model(str(tiny), "bfloat16", "cpu", "mixed")  # the head's dense weight is the embedding
    assert warm.model.fast_head.dense.data_ptr() == warm.model.embed_tokens.weight.data_ptr()
    tokens = list(range(3, 20))  # wide enough for the dense head
    assert torch.equal(prefill_logits(warm, tokens), prefill_logits(cold, tokens))


@pytest.mark.skipif(not can_pack(BF16, CPU), reason="this CPU's oneDNN runs no bf16 matmuls")
def test_the_bundled_model_looks_tokens_up_in_the_cache_map(tmp_path, monkeypatch):
    from inferd.models.gguf import iter_gguf_tensors

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    loaded = load_model(weights="bf16")  # its head a packed copy of the tied embedding
    (cache_file,) = (tmp_path / "cache" / "inferd" / "weights").glob("*.safetensors")
    assert isinstance(loaded.model.fast_head, PackedLinear)
    embedding = loaded.model.embed_tokens.weight
    assert mapped_file(embedding) == str(cache_file)
    dequantized = next(t for name, t in iter_gguf_tensors(loaded.path) if name.endswith("embed_tokens.weight"))
    rows = torch.tensor([0, 2, 1000, 262143])
    assert torch.equal(embedding[rows], dequantized[rows])


def test_a_new_cache_version_replaces_the_old_ones_of_its_model_and_scheme(tiny, tmp_path):
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    (current,) = (tmp_path / "cache" / "inferd" / "weights").glob("tiny.*.safetensors")
    current.unlink()
    name, what, version, _ = current.name.rsplit(".", 3)
    older = current.with_name(f"{name}.{what}.{'0' * len(version)}.safetensors")  # the model file or torch changed
    legacy = current.with_name(f"{name}.{'a' * 16}.safetensors")  # named as an earlier release named them
    other_scheme = current.with_name(f"{name}.{'b' * len(what)}.{version}.safetensors")
    other_model = current.with_name(f"{name}x.{what}.{'0' * len(version)}.safetensors")
    for path in (older, legacy, other_scheme, other_model):
        path.write_bytes(b"")
    assert sorted(weight_cache.stale_versions(current)) == sorted([older, legacy])
    load_model(str(tiny), "bfloat16", "cpu", "int8")
    assert sorted(p.name for p in current.parent.iterdir()) == sorted([current.name, other_scheme.name,
                                                                        other_model.name])
