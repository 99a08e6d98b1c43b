"""The BERT family of encoders (BERT, MiniLM, BGE, E5; RoBERTa-style position
numbering; RoFormer's rotary positions), with the sequence-classification head
of cross-encoders.

A batch is packed: the token rows of every sequence one after another, [T, hidden],
so nothing ever computes padding: the projections and the MLP take all rows at
once, attention takes each run of equal-length sequences as one block
(`EncoderBatch`): short sequences' in one native call (float32 on CPU),
longer ones' through torch's SDPA. The projections run oneDNN on a weight
reordered at load (`Projection`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from inferd.arch.base import WeightLoadError
from inferd.arch.encoder_projection import Projection
from inferd.kernels import encoder_attention
from inferd.models.encoder_config import EncoderConfig

# In place: the MLP's widest tensor is rewritten where it lies.
ACTIVATIONS = {
    "gelu": torch.ops.aten.gelu_,
    "gelu_new": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "relu": torch.relu_,
}

# Hugging Face name (after the model prefix) -> this module's name.
_RENAMES = [
    (re.compile(r"^embeddings_project\."), "embed_project."),
    (re.compile(r"^embeddings\.LayerNorm\."), "embed_norm."),
    (re.compile(r"^embeddings\."), ""),
    (re.compile(r"^encoder\.layer\.(\d+)\.attention\.output\.dense\."), r"layers.\1.attn_out."),
    (re.compile(r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\."), r"layers.\1.attn_norm."),
    (re.compile(r"^encoder\.layer\.(\d+)\.intermediate\.dense\."), r"layers.\1.up."),
    (re.compile(r"^encoder\.layer\.(\d+)\.output\.dense\."), r"layers.\1.down."),
    (re.compile(r"^encoder\.layer\.(\d+)\.output\.LayerNorm\."), r"layers.\1.out_norm."),
    (re.compile(r"^pooler\.dense\."), "pooler."),
    (re.compile(r"^classifier\.out_proj\."), "classifier."),
    (re.compile(r"^classifier\.dense\."), "pooler."),
]
_QKV = re.compile(r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)$")
_SHARD = {"query": 0, "key": 1, "value": 2}
_PREFIXES = ("bert.", "roberta.", "roformer.", "model.")
# Tensors a checkpoint may carry that no encoder forward reads: masked-LM heads, buffers,
# RoFormer's sinusoid table (computed here, in float64, as its checkpoints were made).
_UNUSED = re.compile(r"^(cls\.|lm_head\.|position_ids$|embeddings\.position_ids$|encoder\.embed_positions\.)")


@dataclass
class EncoderBatch:
    """How packed token rows form sequences: `lengths[i]` rows each, in order.
    Sequences of one length that lie next to each other form a group, whose
    rows are one [count, length] block: attention runs per group, unpadded
    and unmasked (callers sort a batch by length to make few groups)."""

    lengths: list[int]
    groups: list[tuple[int, int, int]]  # (first row, sequences, length)

    @classmethod
    def of(cls, lengths: Sequence[int]) -> "EncoderBatch":
        lengths = list(lengths)
        groups: list[tuple[int, int, int]] = []
        row = 0
        for n in lengths:
            if groups and groups[-1][2] == n:
                start, count, _ = groups[-1]
                groups[-1] = (start, count + 1, n)
            else:
                groups.append((row, 1, n))
            row += n
        return cls(lengths, groups)

    @property
    def first_rows(self) -> list[int]:
        starts, at = [], 0
        for n in self.lengths:
            starts.append(at)
            at += n
        return starts


class EncoderLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        hidden = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv = Projection(hidden, 3 * hidden)
        self.attn_out = Projection(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.up = Projection(hidden, cfg.intermediate_size)
        self.down = Projection(cfg.intermediate_size, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=cfg.layer_norm_eps)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.rotated = (2 if cfg.rotary else 0) + (1 if cfg.rotary_value else 0)  # of query, key, value

    def forward(self, x: torch.Tensor, batch: EncoderBatch, attn: torch.Tensor,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """`attn`: a [T, hidden] tensor every layer writes its attention into."""
        qkv = self.qkv(x)
        if self.rotated:
            self._rotate(qkv, *rotary)
        x = self.attn_norm(self.attn_out.add_onto(x, self.attention(qkv, batch, attn)))
        return self.out_norm(self.down.add_onto(x, self.act(self.up(x))))

    def _rotate(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """RoFormer's rotary positions, in place: each head's pairs (x[2i], x[2i+1])
        of query and key (and value, with rotary_value) turned by position * theta_i."""
        pairs = qkv.view(qkv.shape[0], 3, self.heads, self.head_dim // 2, 2)[:, :self.rotated]
        even, odd = pairs[..., 0], pairs[..., 1]
        cos, sin = cos[:, None, None], sin[:, None, None]  # [T, 1, 1, D/2]
        turned_even = even * cos - odd * sin
        odd.mul_(cos).addcmul_(even, sin)
        even.copy_(turned_even)

    def attention(self, qkv: torch.Tensor, batch: EncoderBatch, out: torch.Tensor) -> torch.Tensor:
        out[sum(batch.lengths):] = 0  # rows past the sequences (padding to a recurring size) attend nothing
        groups = batch.groups
        if encoder_attention.supports(qkv):  # short sequences: one native call for every group and head
            short = [group for group in groups if group[2] <= encoder_attention.MAX_LENGTH]
            if short:
                encoder_attention.encoder_attention(qkv, self.heads, self.head_dim, torch.tensor(short), out)
            groups = [group for group in groups if group[2] > encoder_attention.MAX_LENGTH]
        for start, count, length in groups:
            rows = slice(start, start + count * length)
            q, k, v = qkv[rows].view(count, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v)  # [count, H, length, D]
            out[rows].view(count, length, self.heads, self.head_dim).copy_(o.transpose(1, 2))
        return out


class BertEncoder(nn.Module):
    """Token ids in, the last layer's hidden state of every token out; with a
    classification head, `classify` scores each sequence from its first token."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        hidden = cfg.hidden_size
        width = cfg.embedding_width
        self.word_embeddings = nn.Embedding(cfg.vocab_size, width)
        self.position_embeddings = None if cfg.rotary else nn.Embedding(cfg.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(max(cfg.type_vocab_size, 1), width)
        self.embed_norm = nn.LayerNorm(width, eps=cfg.layer_norm_eps)
        self.embed_project = Projection(width, hidden) if width != hidden else None
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.pooler = self.classifier = None
        if cfg.num_labels:
            self.pooler = nn.Linear(hidden, hidden)
            self.classifier = nn.Linear(hidden, cfg.num_labels)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, type_ids: torch.Tensor,
                batch: EncoderBatch) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(type_ids)
        rotary = None
        if self.position_embeddings is not None:
            x += self.position_embeddings(positions + self.cfg.position_offset)
        else:
            rotary = rotary_angles(positions, self.cfg.head_dim, x.dtype)
        x = self.embed_norm(x)
        if self.embed_project is not None:
            x = self.embed_project(x)
        attn = x.new_empty(x.shape[0], self.cfg.hidden_size)
        for layer in self.layers:
            x = layer(x, batch, attn, rotary)
        return x

    def classify(self, hidden: torch.Tensor, batch: EncoderBatch) -> torch.Tensor:
        """[B, num_labels] logits in float32 from each sequence's first token."""
        first = hidden[torch.tensor(batch.first_rows, device=hidden.device)]
        pooled = self.pooler(first)
        pooled = torch.tanh(pooled) if self.cfg.classifier_act == "tanh" else ACTIVATIONS[self.cfg.classifier_act](pooled)
        return self.classifier(pooled).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype, device: torch.device) -> None:
        """Assign every parameter from (Hugging Face name, tensor) pairs, query,
        key and value fused into one projection."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        qkv: dict[str, list[torch.Tensor | None]] = {}
        for name, tensor in weights:
            name = _strip_prefix(name)
            fused = _QKV.match(name)
            if fused:
                layer, part, attr = fused.groups()
                key = f"layers.{layer}.qkv.{attr}"
                parts = qkv.setdefault(key, [None, None, None])
                parts[_SHARD[part]] = tensor
                if all(p is not None for p in parts):
                    self._assign(params, key, torch.cat(parts), dtype, device)
                    loaded.add(key)
                continue
            if _UNUSED.match(name):
                continue
            target = _rename(name)
            if target.startswith(("pooler.", "classifier.")) and self.classifier is None:
                continue  # an embedding model ignores a checkpoint's pooler
            if target not in params:
                raise WeightLoadError(f"checkpoint tensor {name!r} has no place in the {self.cfg.model_type} encoder")
            self._assign(params, target, tensor, dtype, device)
            loaded.add(target)
        missing = sorted(set(params) - loaded)
        if missing:
            raise WeightLoadError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        for module in self.modules():
            if isinstance(module, Projection):
                module.pack()

    def _assign(self, params, name: str, tensor: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
        if tuple(params[name].shape) != tuple(tensor.shape):
            raise WeightLoadError(f"{name}: checkpoint shape {tuple(tensor.shape)} != model shape {tuple(params[name].shape)}")
        owner_name, attr = name.rsplit(".", 1)
        setattr(self.get_submodule(owner_name), attr,
                nn.Parameter(tensor.to(device=device, dtype=dtype), requires_grad=False))


def build_encoder(cfg: EncoderConfig) -> BertEncoder:
    """An empty encoder on the meta device; `load_weights` fills it."""
    with torch.device("meta"):
        return BertEncoder(cfg)


def rotary_angles(positions: torch.Tensor, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, head_dim / 2] of position * 10000^(-2i / head_dim), made in
    float64 (RoFormer's own table is) so that long positions keep their precision."""
    inv_freq = 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _strip_prefix(name: str) -> str:
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _rename(name: str) -> str:
    for pattern, replacement in _RENAMES:
        renamed, n = pattern.subn(replacement, name)
        if n:
            return renamed
    return name
