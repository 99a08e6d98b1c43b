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
        first = split_point([len(item) for item in items])
        results = self._forward(items[:first]) + (self._forward(items[first:]) if first < len(items) else [])
        unsorted: list[PooledOutput] = [0.0] * len(inputs)
        for position, index in enumerate(order):
            unsorted[index] = results[position]
        return unsorted

    def _forward(self, items: Sequence[PooledInput]) -> list[PooledOutput]:
        lengths = [len(item) for item in items]
        pad = padded_rows(sum(lengths)) - sum(lengths)
        ids = torch.tensor([t for item in items for t in item.ids] + [0] * pad, dtype=torch.int64, device=self.device)
        positions = torch.cat([torch.arange(n) for n in lengths] + [torch.zeros(pad, dtype=torch.int64)]).to(self.device)
        types = [t for item in items for t in (item.type_ids or [0] * len(item))] + [0] * pad
        batch = EncoderBatch.of(lengths)
        hidden = self.model(ids, positions, torch.tensor(types, dtype=torch.int64, device=self.device), batch)
        hidden = hidden[: sum(lengths)]
        if self.scores:
            return relevance(self.model.classify(hidden, batch))
        return _outputs(hidden, lengths, self.mode, self.normalize)


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
    the matmuls' compiled kernels (oneDNN primitives, ~2 ms and ~0.6 MB each
    for a new shape) are reused; the extra rows belong to no sequence."""
    step = _row_step(rows)
    return -(-rows // step) * step


def _row_step(rows: int) -> int:
    return 16 if rows <= 256 else 64 if rows <= 1024 else 256


# A batch is split in two where that saves at least this many padding rows
# (each costs a row of every matmul; a second forward costs about a dozen rows).
MIN_ROWS_SAVED = 32


def split_point(lengths: Sequence[int]) -> int:
    """How many of a batch's sequences (sorted by length) run in a first
    forward: all of them, or where padding the whole batch to a recurring size
    would waste MIN_ROWS_SAVED rows or more, those that fill the recurring size
    just below it, the rest running as a small second forward (e.g. 3,664 rows:
    3,584 + 80 instead of 3,840, 4.5% less work). Each sequence's result is the
    same either way: only attention mixes rows, and only within a sequence."""
    total = sum(lengths)
    below = total // _row_step(total) * _row_step(total)
    taken = rows = 0
    while taken < len(lengths) and rows + lengths[taken] <= below:
        rows += lengths[taken]
        taken += 1
    saved = padded_rows(total) - padded_rows(rows) - padded_rows(total - rows)
    return taken if 0 < taken < len(lengths) and saved >= MIN_ROWS_SAVED else len(lengths)


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
