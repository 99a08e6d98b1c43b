"""One pooled forward over a batch of token sequences: an encoder's pooled
vectors or cross-encoder scores, or a chat model's hidden states pooled.
Called on the thread that owns the model; results are numpy float32."""

from __future__ import annotations

from collections.abc import Sequence
import torch

from inferd.arch.attention import AttentionMetadata, ContextView, PrefillSpan
from inferd.arch.base import CausalLM
from inferd.arch.bert import BertEncoder, EncoderBatch
from inferd.engine.embedding.model import PooledInput, PooledOutput
from inferd.engine.embedding.pooling import per_token, pool


class EncoderForward:
    """A BERT-family encoder: pooled (and perhaps normalized) vectors, or with
    a classification head, one relevance score per (query, document) pair."""

    def __init__(self, model: BertEncoder, mode: str, normalize: bool, device: torch.device):
        self.model, self.mode, self.normalize, self.device = model, mode, normalize, device
        self.scores = model.classifier is not None

    @torch.inference_mode()
    def __call__(self, inputs: Sequence[PooledInput]) -> list[PooledOutput]:
        # Sorted by length, equal lengths lie together and attend as one block.
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        items = [inputs[i] for i in order]
        lengths = [len(item) for item in items]
        pad = padded_rows(sum(lengths)) - sum(lengths)
        ids = torch.tensor([t for item in items for t in item.ids] + [0] * pad, dtype=torch.int64, device=self.device)
        positions = torch.cat([torch.arange(n) for n in lengths] + [torch.zeros(pad, dtype=torch.int64)]).to(self.device)
        types = [t for item in items for t in (item.type_ids or [0] * len(item))] + [0] * pad
        batch = EncoderBatch.of(lengths)
        hidden = self.model(ids, positions, torch.tensor(types, dtype=torch.int64, device=self.device), batch)
        hidden = hidden[: sum(lengths)]
        if self.scores:
            results = relevance(self.model.classify(hidden, batch))
        else:
            results = _outputs(hidden, lengths, self.mode, self.normalize)
        unsorted: list[PooledOutput] = [0.0] * len(inputs)
        for position, index in enumerate(order):
            unsorted[index] = results[position]
        return unsorted


class DecoderForward:
    """A chat model's last hidden states (after its final norm), pooled: the
    prompt is prefilled into scratch K/V that is dropped after the forward, so
    the chat engine's cache is never touched and nothing is sampled."""

    def __init__(self, model: CausalLM, mode: str, normalize: bool, device: torch.device, dtype: torch.dtype):
        self.model, self.mode, self.normalize, self.device, self.dtype = model, mode, normalize, device, dtype
        cfg = model.cfg
        self.window = cfg.sliding_window if any(cfg.is_sliding(i) for i in range(cfg.num_layers)) else None
        self.scores = False

    @torch.inference_mode()
    def __call__(self, inputs: Sequence[PooledInput]) -> list[PooledOutput]:
        cfg = self.model.cfg
        lengths = [len(item) for item in inputs]
        total = sum(lengths)
        shape = (total, cfg.num_kv_heads, cfg.head_dim)
        scratch = [(torch.empty(shape, dtype=self.dtype, device=self.device),
                    torch.empty(shape, dtype=self.dtype, device=self.device)) for _ in range(cfg.num_layers)]
        spans, start = [], 0
        for n in lengths:
            spans.append(self._span(start, n))
            start += n
        meta = AttentionMetadata(slot_mapping=torch.arange(total, device=self.device), prefills=spans)
        ids = torch.tensor([t for item in inputs for t in item.ids], dtype=torch.int64, device=self.device)
        positions = torch.cat([torch.arange(n) for n in lengths]).to(self.device)
        hidden = self.model(ids, positions, scratch, meta)
        return _outputs(hidden, lengths, self.mode, self.normalize)

    def _span(self, start: int, n: int) -> PrefillSpan:
        """A cold prefill of one whole sequence: it attends its own K/V, causally."""
        sliding = None
        if self.window is not None and n > self.window:
            pos = torch.arange(n)
            windowed = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - self.window)
            sliding = ContextView(slots=None, mask=windowed.to(self.device))
        return PrefillSpan(start=start, end=start + n, cold=True, full=ContextView(slots=None, mask=None),
                           sliding=sliding)


def padded_rows(rows: int) -> int:
    """The rows a batch of `rows` tokens is computed as: a few sizes recur, so
    the matmuls' compiled kernels (oneDNN primitives, ~2 ms each to make for a
    new shape) are reused; the extra rows belong to no sequence."""
    step = 16 if rows <= 256 else 64 if rows <= 1024 else 256
    return -(-rows // step) * step


def relevance(logits: torch.Tensor) -> list[float]:
    """A cross-encoder's score in [0, 1]: the sigmoid of a single logit, or the
    probability of the last label (the "relevant" one) of several."""
    if logits.shape[1] == 1:
        return torch.sigmoid(logits[:, 0]).tolist()
    return torch.softmax(logits, dim=-1)[:, -1].tolist()


def _outputs(hidden: torch.Tensor, lengths: list[int], mode: str, normalize: bool) -> list[PooledOutput]:
    if mode == "none":  # as llama-server: per-token vectors are never normalized
        return [rows.cpu().numpy() for rows in per_token(hidden, lengths)]
    return list(pool(hidden, lengths, mode, normalize).cpu().numpy())
