"""Matrix products over a GGUF file's own quantized blocks (gguf_gemv.c).

A weight is the file's bytes for its rows, [N, bytes per row] uint8, in one
of the block formats below; the product quantizes activations to int8 per
group of 32 inputs and sums exact integer products per block, as llama.cpp
does. Meant for decode steps: up to eight rows per pass over the weights.

Tensors whose rows fill tiles of 8 (every format above) are held
in tiles (`to_tiles`, gguf_tiles.h): the file's values and scales reordered
at load so that one vector op sums 8 output rows, up to 2-3 times faster
than a row at a time.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from inferd.kernels.native import I64, INT, PTR, load_kernel

# GGML type id -> (weights per block, bytes per block)
BLOCKS = {
    "Q4_0": (2, 32, 18),
    "Q5_0": (6, 32, 22),
    "Q8_0": (8, 32, 34),
    "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210),
}
MAX_ROWS = 8  # activation rows applied per pass over the weights
TILE = 8  # output rows per tile
TILE_FORMATS = ("Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K")
_TILED = 0x100  # beside a part's type: its bytes are tiles


# The library's functions: (argument types, result type).
SIGNATURES = dict(inferd_gguf_gemv=([INT, PTR, PTR, PTR, I64, PTR, I64, PTR, INT, PTR, INT], INT),
                  inferd_gguf_argmax=([INT, PTR, PTR, PTR, I64, PTR, I64, PTR, INT, INT, PTR], INT),
                  inferd_gguf_gemv_vectorized=([], INT),
                  inferd_gguf_screen_rows=([], INT),
                  inferd_gguf_tile_pairs=([], INT),
                  inferd_gguf_to_tiles=([INT, PTR, I64, I64, PTR], INT),
                  inferd_gguf_screen_of=([PTR, I64, I64, PTR], INT),
                  inferd_gguf_screened_argmax=([PTR, PTR, I64, I64, PTR, I64, INT, INT, PTR, PTR], INT))


@functools.cache
def library(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    return load_kernel(Path(__file__).with_name("gguf_gemv.c"), extra_flags, **SIGNATURES)


def available() -> bool:
    return library() is not None


def vectorized() -> bool:
    """The build in use has a vector path (AVX2 or better); the portable one sums in scalar C."""
    lib = library()
    return lib is not None and bool(lib.inferd_gguf_gemv_vectorized())


def screen_rows(lib: ctypes.CDLL | None = None) -> int:
    """The most rows for which a greedy pick from a Q8_0 head is faster through its screen
    (`HeadScreen`): any number on vector builds without VNNI, where Q8_0's signed bytes take
    twice the instructions of the screen's; one or two with VNNI, where the head is bound by
    memory at so few rows; none on the portable build."""
    lib = lib or library()
    return 0 if lib is None else lib.inferd_gguf_screen_rows()


def supports(block_format: str, in_features: int) -> bool:
    """The kernel computes this format at this width."""
    return block_format in BLOCKS and in_features % BLOCKS[block_format][1] == 0


def row_bytes(block_format: str, in_features: int) -> int:
    _, size, nbytes = BLOCKS[block_format]
    return in_features // size * nbytes


def tiled(block_format: str, rows: int) -> bool:
    """A tensor of this format and row count is held in tiles."""
    return block_format in TILE_FORMATS and rows % TILE == 0


def tiled_row_bytes(block_format: str, in_features: int) -> int:
    """A row's bytes in tiles: the file's, but for Q4_K and Q5_K, whose 6-bit scales are unpacked
    (148 bytes for 144, 180 for 176), and Q6_K, whose 6-bit weights are (274 for 210)."""
    unpacked = {"Q4_K": 148, "Q5_K": 180, "Q6_K": 274}
    if block_format in unpacked:
        return in_features // 256 * unpacked[block_format]
    return row_bytes(block_format, in_features)


def tile_layout(lib: ctypes.CDLL | None = None) -> str:
    """How the build lays out tiles (gguf_tiles.h, `tile_place`): "pairs" where it has 512-bit
    spans, else "single". Tiles are read by a build of the same layout as made them."""
    lib = lib or library()
    return "pairs" if lib is not None and lib.inferd_gguf_tile_pairs() else "single"


def to_tiles(block_format: str, raw: torch.Tensor, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """The file's rows [N, bytes per row] reordered into tiles [N, tiled_row_bytes], laid
    out for `lib` (`tile_layout`)."""
    if not tiled(block_format, raw.shape[0]) or raw.dtype != torch.uint8 or raw.dim() != 2:
        raise ValueError(f"a {block_format} tensor of shape {tuple(raw.shape)} is not held in tiles")
    raw = raw.contiguous()
    in_features = raw.shape[1] // BLOCKS[block_format][2] * BLOCKS[block_format][1]
    out = torch.empty(raw.shape[0], tiled_row_bytes(block_format, in_features), dtype=torch.uint8)
    if (lib or library()).inferd_gguf_to_tiles(BLOCKS[block_format][0], raw.data_ptr(), raw.shape[0], in_features,
                                               out.data_ptr()):
        raise ValueError(f"the kernel cannot tile a {block_format} tensor of shape {tuple(raw.shape)}")
    return out


class Parts:
    """The matrices of one projection, stacked by rows: their formats and the
    file's bytes (each in the file's row order, or in tiles where `in_tiles`
    says), held as the arrays the kernel takes."""

    def __init__(self, parts: list[tuple[str, torch.Tensor]], in_features: int, in_tiles: list[bool] | None = None):
        in_tiles = in_tiles or [False] * len(parts)
        for (block_format, raw), tiles in zip(parts, in_tiles, strict=True):
            if tiles and not tiled(block_format, raw.shape[0]):
                raise ValueError(f"a {block_format} weight of {raw.shape[0]} rows is not held in tiles")
            size = (tiled_row_bytes if tiles else row_bytes)(block_format, in_features)
            if not supports(block_format, in_features) or raw.dtype != torch.uint8 or raw.dim() != 2 \
                    or raw.shape[1] != size:
                raise ValueError(f"a {block_format} weight of shape {tuple(raw.shape)} does not take "
                                 f"{in_features} inputs")
        self.in_features = in_features
        self.out_features = sum(raw.shape[0] for _, raw in parts)
        self.raws = [raw.contiguous() for _, raw in parts]  # kept alive: the kernel reads their memory
        n = len(parts)
        self.count = n
        self.types = (ctypes.c_int * n)(*(BLOCKS[block_format][0] | (_TILED if tiles else 0)
                                          for (block_format, _), tiles in zip(parts, in_tiles)))
        self.pointers = (ctypes.c_void_p * n)(*(raw.data_ptr() for raw in self.raws))
        self.rows = (ctypes.c_int64 * n)(*(raw.shape[0] for raw in self.raws))


def matmul(x: torch.Tensor, parts: Parts, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype = torch.bfloat16, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """x @ W.T for x [..., K] (bf16, or float32 where the engine computes in
    it) and W the stacked `parts`; a bias is in x's dtype."""
    flat = _checked_rows(x, parts, bias, out_dtype)
    y = torch.empty((flat.shape[0], parts.out_features), dtype=out_dtype)
    if flat.shape[0]:
        _raise_for((lib or library()).inferd_gguf_gemv(
            parts.count, parts.types, parts.pointers, parts.rows, parts.in_features, flat.data_ptr(),
            flat.shape[0], None if bias is None else bias.data_ptr(), x.dtype == torch.float32, y.data_ptr(),
            out_dtype == torch.float32))
    return y.view(*x.shape[:-1], parts.out_features)


def argmax(x: torch.Tensor, parts: Parts, bias: torch.Tensor | None = None,
           out_dtype: torch.dtype = torch.bfloat16, lib: ctypes.CDLL | None = None) -> list[int]:
    """Each row's first argmax of `matmul(x, parts, bias, out_dtype)`, or -1 where the
    row has no finite maximum, without writing the product: a greedy step's token
    from the LM head, 262,144 logits a row left unwritten and unread."""
    flat = _checked_rows(x, parts, bias, out_dtype)
    tokens = torch.empty(flat.shape[0], dtype=torch.int64)
    if flat.shape[0]:
        _raise_for((lib or library()).inferd_gguf_argmax(
            parts.count, parts.types, parts.pointers, parts.rows, parts.in_features, flat.data_ptr(),
            flat.shape[0], None if bias is None else bias.data_ptr(), x.dtype == torch.float32,
            out_dtype == torch.float32, tokens.data_ptr()))
    return tokens.tolist()


class HeadScreen:
    """A Q8_0 head's top five bits a weight, in Q5_0 tiles (head_screen.h): a greedy step reads
    them, 65% of the head's bytes, to bound every logit, then computes from the head only the
    tiles that can hold the argmax. The pick is `argmax`'s to the bit."""

    def __init__(self, head_tiles: torch.Tensor, in_features: int, lib: ctypes.CDLL | None = None):
        rows = head_tiles.shape[0]
        if head_tiles.dtype != torch.uint8 or head_tiles.shape != (rows, tiled_row_bytes("Q8_0", in_features)) \
                or not tiled("Q8_0", rows):
            raise ValueError(f"a screen takes a Q8_0 head in tiles, not {head_tiles.dtype} {tuple(head_tiles.shape)}")
        self.lib = lib or library()
        self.head = head_tiles.contiguous()
        self.in_features = in_features
        self.parts = Parts([("Q8_0", self.head)], in_features, [True])  # what `argmax` checks its rows against
        self.screen = torch.empty(rows, tiled_row_bytes("Q5_0", in_features), dtype=torch.uint8)
        _raise_for(self.lib.inferd_gguf_screen_of(self.head.data_ptr(), rows, in_features, self.screen.data_ptr()))
        tiles = rows // TILE
        self.scratch = torch.empty(tiles * MAX_ROWS + tiles, dtype=torch.float32)  # bounds, then tile numbers
        self.whole_head_passes = 0  # passes of MAX_ROWS rows the screen could not narrow

    def argmax(self, x: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16) -> list[int]:
        """`argmax(x, the head's parts, None, out_dtype)`, read mostly from the screen."""
        flat = _checked_rows(x, self.parts, None, out_dtype)
        tokens = torch.empty(flat.shape[0], dtype=torch.int64)
        if flat.shape[0]:
            status = self.lib.inferd_gguf_screened_argmax(
                self.head.data_ptr(), self.screen.data_ptr(), self.head.shape[0], self.in_features, flat.data_ptr(),
                flat.shape[0], x.dtype == torch.float32, out_dtype == torch.float32, self.scratch.data_ptr(),
                tokens.data_ptr())
            self.whole_head_passes += status == 1
            _raise_for(0 if status == 1 else status)
        return tokens.tolist()


def _checked_rows(x: torch.Tensor, parts: Parts, bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """x as contiguous [rows, K], once its dtype, width and the bias fit the weights."""
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the GGUF kernels take bf16 or float32 activations, not {x.dtype}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the GGUF kernels write bf16 or float32, not {out_dtype}")
    if x.shape[-1] != parts.in_features:
        raise ValueError(f"the weights take {parts.in_features} inputs, not {x.shape[-1]}")
    if bias is not None and (bias.dtype != x.dtype or bias.shape != (parts.out_features,) or not bias.is_contiguous()):
        raise TypeError(f"the bias must be contiguous {x.dtype} [{parts.out_features}], "
                        f"not {bias.dtype} {tuple(bias.shape)}")
    flat = x.reshape(-1, parts.in_features)
    return flat if flat.is_contiguous() else flat.contiguous()


def _raise_for(status: int) -> None:
    if status == -1:
        raise MemoryError("the GGUF kernel could not allocate its activation buffers")
    if status:
        raise ValueError("the GGUF kernel refused its weights")
