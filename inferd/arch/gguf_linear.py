"""A projection computed from a GGUF file's own quantized blocks.

Decode steps (a few rows) run `inferd.kernels.gguf_gemv` over the file's
bytes: the weights are exactly the file's, read at their stored size
(reordered into tiles of 8 rows at load where the rows fill them,
`gguf_gemv.to_tiles`). A fused projection (Q, K and V; gate and up) may mix
block formats, so it keeps one part per source tensor, each writing its own
columns of the output.
Prefill, bound by compute rather than bytes, uses the dense weight where
the model keeps one (bf16 on AMX or AMD's AVX512-BF16, or the portable build: the file's values
in the engine dtype, packed for oneDNN where that applies;
`file_blocks.keeps_dense_copies`), except for the leading rows a step
marks as lone decode rows
(`arch/decode_rows.py`, speculative verification): those always run the
kernel, whose sums for one row do not depend on the rows beside it.
"""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.decode_rows import leading_decode_rows
from inferd.arch.quantized_linear import dense_product
from inferd.kernels import gguf_gemv


class GGUFLinear(nn.Module):
    def __init__(self, in_features: int, parts: list[tuple[str, int]], dtype: torch.dtype, bias: bool = False,
                 dense_from_rows: int | None = None):
        """`parts`: (block format, output rows) of each source tensor, in output order.
        Buffers are empty until filled by `from_parts` or a state dict."""
        super().__init__()
        self.in_features = in_features
        self.formats = [block_format for block_format, _ in parts]
        self.out_features = sum(rows for _, rows in parts)
        for i, (block_format, rows) in enumerate(parts):
            size = (gguf_gemv.tiled_row_bytes if gguf_gemv.tiled(block_format, rows) else gguf_gemv.row_bytes)
            self.register_buffer(f"raw{i}", torch.empty(rows, size(block_format, in_features), dtype=torch.uint8))
        self.bias = nn.Parameter(torch.empty(self.out_features, dtype=dtype), requires_grad=False) if bias else None
        self.dense_from_rows = dense_from_rows
        dense = None if dense_from_rows is None else torch.empty(self.out_features, in_features, dtype=dtype)
        self.register_buffer("dense", dense)
        self.packed_dense = None  # set by arch.quantize.pack_for_cpu; replaces `dense`
        self.kernel_out_dtype = dtype  # an LM head asks for float32 logits
        self._parts: gguf_gemv.Parts | None = None  # built on first use: a state dict may replace the buffers
        self._screen: gguf_gemv.HeadScreen | None = None  # likewise; a Q8_0 head's, where it pays (`screen`)
        self._screen_built = False

    @classmethod
    def from_parts(cls, raws: list[tuple[str, torch.Tensor]], dense: torch.Tensor, bias: torch.Tensor | None,
                   dtype: torch.dtype, dense_from_rows: int | None) -> GGUFLinear:
        with torch.device("meta"):
            layer = cls(dense.shape[1], [(block_format, raw.shape[0]) for block_format, raw in raws], dtype,
                        bias is not None, dense_from_rows)
        for i, (block_format, raw) in enumerate(raws):
            tiled = gguf_gemv.tiled(block_format, raw.shape[0])
            setattr(layer, f"raw{i}", gguf_gemv.to_tiles(block_format, raw) if tiled else raw)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(dtype), requires_grad=False)
        if dense_from_rows is not None:
            layer.dense = dense.to(dtype)  # no copy when already in dtype (e.g. a tied embedding)
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if self.dense_from_rows is None or rows < self.dense_from_rows:
            return self._blocks(x)
        exact = min(leading_decode_rows(), rows)
        if exact == 0:
            return dense_product(self, x)
        if exact == rows:
            return self._blocks(x)
        flat = x.reshape(rows, self.in_features)
        rest = dense_product(self, flat[exact:]).to(self.kernel_out_dtype)
        return torch.cat((self._blocks(flat[:exact]), rest)).view(*x.shape[:-1], self.out_features)

    def argmax(self, x: torch.Tensor) -> list[int] | None:
        """Each row's first argmax of `forward(x).float()` (-1: no finite maximum), where
        forward would run the kernel: found as it computes, the product never written."""
        rows = x.numel() // self.in_features
        if self.dense_from_rows is not None and rows >= self.dense_from_rows and leading_decode_rows() < rows:
            return None
        screen = self.screen() if rows <= gguf_gemv.screen_rows() else None
        if screen is not None:
            return screen.argmax(x, self.kernel_out_dtype)
        return gguf_gemv.argmax(x, self.parts(), self.bias, self.kernel_out_dtype)

    def _blocks(self, x: torch.Tensor) -> torch.Tensor:
        return gguf_gemv.matmul(x, self.parts(), self.bias, self.kernel_out_dtype)

    def block_buffers(self) -> list[str]:
        """Names of the buffers the kernels read: each part's blocks (in tiles where its rows fill them)."""
        return [f"raw{i}" for i in range(len(self.formats))]

    def forget_parts(self) -> None:
        """Call after replacing a block buffer: the kernel's view is built again on next use."""
        self._parts = self._screen = None
        self._screen_built = False

    def parts(self) -> gguf_gemv.Parts:
        """The kernel's view of the weights, built on first use."""
        if self._parts is None:
            raws = [(block_format, getattr(self, f"raw{i}")) for i, block_format in enumerate(self.formats)]
            self._parts = gguf_gemv.Parts(raws, self.in_features,
                                          [gguf_gemv.tiled(block_format, raw.shape[0]) for block_format, raw in raws])
        return self._parts

    def screen(self) -> gguf_gemv.HeadScreen | None:
        """The screen a greedy pick of few enough rows reads first (`gguf_gemv.HeadScreen`,
        `gguf_gemv.screen_rows`), built on first use: for a Q8_0 head without bias."""
        if not self._screen_built:
            self._screen_built = True
            if self.formats == ["Q8_0"] and self.bias is None and gguf_gemv.screen_rows() > 0 \
                    and gguf_gemv.tiled("Q8_0", self.out_features) and self.raw0.device.type == "cpu":
                self._screen = gguf_gemv.HeadScreen(self.raw0, self.in_features)
        return self._screen

    def extra_repr(self) -> str:
        dense = "" if self.dense is None and self.packed_dense is None else f", dense_from_rows={self.dense_from_rows}"
        return f"in_features={self.in_features}, out_features={self.out_features}, formats={self.formats}{dense}"
