"""The GGUF blocks moved onto 2 MB pages: the same bytes in one arena, the
kernels' products unchanged, and nothing moved where the system has no huge pages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_file_blocks import loaded, written
from torch import nn

from inferd.arch.gguf_linear import GGUFLinear
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models import huge_pages
from inferd.models.huge_pages import HUGE_PAGE, move_to_huge_pages, place_blocks_on_huge_pages
from inferd.models.loader import load_model


def huge_page_bytes() -> int:
    """This process's anonymous memory on 2 MB pages (AnonHugePages)."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no AnonHugePages line in /proc/self/smaps_rollup")


def holder(**buffers: torch.Tensor) -> nn.Module:
    module = nn.Module()
    for name, tensor in buffers.items():
        module.register_buffer(name, tensor)
    return module


@pytest.fixture
def with_huge_pages(monkeypatch):
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: True)


def test_buffers_move_in_order_each_on_a_page_of_its_own(with_huge_pages):
    a = torch.arange(5000, dtype=torch.uint8).reshape(50, 100)  # wraps at 256
    b = torch.randn(3, 7)
    module = holder(a=a.clone(), b=b.clone())
    moved = move_to_huge_pages([(module, "a"), (module, "b")])
    assert moved == 8192 + 4096  # 5,000 bytes take two pages, 84 bytes one
    assert torch.equal(module.a, a) and torch.equal(module.b, b)
    assert module.a.dtype == torch.uint8 and module.b.dtype == torch.float32 and module.b.shape == (3, 7)
    assert module.a.data_ptr() % HUGE_PAGE == 0
    assert module.b.data_ptr() == module.a.data_ptr() + 8192
    assert dict(module.named_buffers())["a"] is module.a  # still a registered buffer


def test_the_arena_lives_as_long_as_its_views(with_huge_pages):
    module = holder(a=torch.full((3 << 20,), 7, dtype=torch.uint8))
    move_to_huge_pages([(module, "a")])
    kept = module.a[-10:]
    del module
    assert kept.tolist() == [7] * 10


def test_nothing_moves_without_huge_pages(monkeypatch):
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: False)
    a = torch.ones(10)
    module = holder(a=a)
    assert move_to_huge_pages([(module, "a")]) == 0
    assert module.a is a


def test_nothing_moves_when_the_arena_cannot_be_mapped(with_huge_pages, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(huge_pages.mmap, "mmap", refuse)
    a = torch.ones(10)
    module = holder(a=a)
    assert move_to_huge_pages([(module, "a")]) == 0
    assert module.a is a
    assert "weights stay on 4 KB pages" in caplog.text


def test_the_system_setting_decides(monkeypatch, tmp_path):
    setting = tmp_path / "enabled"
    monkeypatch.setattr(huge_pages, "_THP_SETTING", setting)
    for text, expected in (("always [madvise] never", True), ("[always] madvise never", True),
                           ("always madvise [never]", False)):
        setting.write_text(text)
        assert huge_pages.huge_pages_available() is expected
    setting.unlink()
    assert huge_pages.huge_pages_available() is False


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_models_blocks_move_and_compute_the_same(tmp_path, with_huge_pages, arch):
    net = loaded(written(tmp_path, arch, dense_layer=False), blocks=True)
    layers = [m for m in net.modules() if isinstance(m, GGUFLinear)]
    x = torch.randn(3, net.layers[0].self_attn.qkv_proj.in_features).bfloat16()
    before = {id(layer): layer(x) for layer in layers if layer.in_features == x.shape[1]}  # the head among them
    sources = {(id(layer), name): getattr(layer, name).clone() for layer in layers for name in layer.block_buffers()}

    moved = place_blocks_on_huge_pages(net)

    assert moved >= sum(t.nbytes for t in sources.values())
    for layer in layers:
        for name in layer.block_buffers():
            assert torch.equal(getattr(layer, name), sources[(id(layer), name)])
    pointers = sorted(getattr(layer, name).data_ptr() for layer in layers for name in layer.block_buffers())
    assert pointers[0] % HUGE_PAGE == 0 and pointers[-1] - pointers[0] < moved  # one arena
    assert net.fast_head in layers and id(net.fast_head) in before
    for layer in layers:
        if id(layer) in before:  # the kernels' view follows the new buffers
            assert torch.equal(layer(x), before[id(layer)])


def test_an_arena_of_huge_pages_is_backed_by_them():
    if not huge_pages.huge_pages_available():
        pytest.skip("this system gives no transparent huge pages")
    before = huge_page_bytes()
    module = holder(a=torch.ones(16 << 20, dtype=torch.uint8))
    move_to_huge_pages([(module, "a")])
    assert huge_page_bytes() - before >= HUGE_PAGE  # the kernel may leave some of it on small pages
    assert int(module.a.sum()) == 16 << 20


def greedy_tokens(loaded) -> tuple[list[int], Engine]:
    engine = Engine(loaded, EngineConfig(parallel=2, ctx_size=128, speculative="off"))
    engine.add_request(EngineRequest("r", [5, 9, 17, 3], SamplingParams(max_tokens=12, temperature=0.0,
                                                                          ignore_eos=True)))
    tokens = []
    while engine.has_work:
        tokens += [t for out in engine.step() for t in out.token_ids]
    return tokens, engine


def test_an_engine_moves_its_models_blocks_once_before_its_first_step(tmp_path, monkeypatch):
    path = written(tmp_path, "gemma3", dense_layer=False)
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: False)
    on_small_pages, _ = greedy_tokens(load_model(str(path), dtype="bfloat16"))
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: True)
    loaded = load_model(str(path), dtype="bfloat16")
    tokens, engine = greedy_tokens(loaded)
    head = loaded.model.fast_head.raw0
    assert head.data_ptr() % 4096 == 0 and head.untyped_storage().nbytes() >= HUGE_PAGE  # in an arena
    assert tokens == on_small_pages and len(tokens) == 12
    engine.settle_weights()  # once only
    assert loaded.model.fast_head.raw0 is head
