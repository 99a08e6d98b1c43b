"""Turns a scheduled batch into one forward pass and the logits to sample.

Rows are ordered decodes first (one token each, grouped by padded context
length), then prefill chunks. A request verifying speculative drafts runs
as a chunk of its last token plus the drafts and gets logits for each. The KV cache is one (K, V) pair per layer, each
[num_blocks * block_size, kv_heads, head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inferd.arch.attention import AttentionMetadata, ContextView, DecodeGroup, PrefillSpan
from inferd.arch.base import CausalLM
from inferd.engine.request import Request
from inferd.engine.scheduler import ScheduledBatch


@dataclass
class StepResult:
    logits: torch.Tensor  # [N, V] float32: per sampling request one row, plus one per draft token
    sampling: list[Request]  # in logits row order


# Decode contexts are padded to a multiple of this many tokens.
DECODE_BUCKET = 64


def _bucket(context_len: int) -> int:
    return -(-context_len // DECODE_BUCKET) * DECODE_BUCKET


class ModelRunner:
    def __init__(self, model: CausalLM, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device):
        cfg = model.cfg
        self.model = model
        self.block_size = block_size
        self.device = device
        self.window = cfg.sliding_window if any(cfg.is_sliding(i) for i in range(cfg.num_layers)) else None
        shape = (num_blocks * block_size, cfg.num_kv_heads, cfg.head_dim)
        # Uninitialized: a slot is always written before attention reads it
        # (padding reads clamp to a written slot), and untouched pages of a
        # large pool cost no memory until sequences reach them.
        self.kv_caches = [
            (torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device))
            for _ in range(cfg.num_layers)
        ]

    @staticmethod
    def kv_bytes_per_token(model: CausalLM, dtype: torch.dtype) -> int:
        cfg = model.cfg
        return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> StepResult:
        def order(pair):  # decodes first, by bucket; then prefills
            req, n = pair
            return (1, 0) if n != 1 else (0, _bucket(req.num_computed_tokens + 1))

        pairs = sorted(zip(batch.requests, batch.num_new_tokens), key=order)
        token_ids: list[int] = []
        positions: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        decode_ctx: list[int] = []  # context length of each decode row
        decode_tables: list[torch.Tensor] = []
        prefills: list[PrefillSpan] = []
        sample_rows: list[int] = []
        sampling: list[Request] = []
        for req, n in pairs:
            start = req.num_computed_tokens
            table = torch.tensor(req.block_table, dtype=torch.int64)
            pos = torch.arange(start, start + n)
            row = len(token_ids)
            drafts = req.draft_token_ids
            token_ids.extend((req.all_token_ids + drafts if drafts else req.all_token_ids)[start : start + n])
            positions.append(pos)
            slots.append(self._slots(table, pos))
            if n == 1:
                decode_ctx.append(start + 1)
                decode_tables.append(table)
            else:
                prefills.append(self._prefill_span(row, start, n, table))
            if start + n == req.num_tokens + len(drafts):
                sample_rows.extend(range(row + n - 1 - len(drafts), row + n))
                sampling.append(req)
        meta = AttentionMetadata(slot_mapping=torch.cat(slots).to(self.device), prefills=prefills)
        meta.decodes = self._decode_groups(decode_ctx, decode_tables)
        ids = torch.tensor(token_ids, dtype=torch.int64, device=self.device)
        hidden = self.model(ids, torch.cat(positions).to(self.device), self.kv_caches, meta)
        if not sampling:  # only unfinished prefill chunks this step
            return StepResult(logits=hidden.new_empty((0, 0), dtype=torch.float32), sampling=[])
        logits = self.model.compute_logits(hidden[torch.tensor(sample_rows, dtype=torch.int64, device=self.device)])
        return StepResult(logits=logits, sampling=sampling)

    def _slots(self, table: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def _decode_groups(self, ctx: list[int], tables: list[torch.Tensor]) -> list[DecodeGroup]:
        groups = []
        start = 0
        while start < len(ctx):
            width = _bucket(ctx[start])
            end = start
            while end < len(ctx) and _bucket(ctx[end]) == width:
                end += 1
            lengths = torch.tensor(ctx[start:end])
            group_tables = tables[start:end]
            full = self._gather_view(group_tables, lengths, torch.zeros_like(lengths), width)
            sliding = None
            if self.window is not None:
                starts = (lengths - self.window).clamp(min=0)
                sliding = self._gather_view(group_tables, lengths, starts, min(self.window, width))
            groups.append(DecodeGroup(start, end, full, sliding))
            start = end
        return groups

    def _gather_view(self, tables, lengths, starts, width) -> ContextView:
        pos = starts[:, None] + torch.arange(width)[None, :]  # [B, width]
        bias = torch.zeros(pos.shape).masked_fill_(pos >= lengths[:, None], float("-inf"))
        pos = torch.minimum(pos, (lengths - 1)[:, None])
        slot_rows = [self._slots(t, p) for t, p in zip(tables, pos)]
        return ContextView(slots=torch.stack(slot_rows).to(self.device), mask=bias[:, None, None, :].to(self.device))

    def _prefill_span(self, row: int, start: int, n: int, table: torch.Tensor) -> PrefillSpan:
        length = start + n
        cold = start == 0
        key_pos = torch.arange(length)
        query_pos = torch.arange(start, length)[:, None]
        slots = None if cold else self._slots(table, key_pos).to(self.device)
        causal = key_pos[None, :] <= query_pos
        full = ContextView(slots=slots, mask=None if cold else causal.to(self.device))
        sliding = None
        if self.window is not None and length > self.window:
            windowed = causal & (key_pos[None, :] > query_pos - self.window)
            sliding = ContextView(slots=slots, mask=windowed.to(self.device))
        return PrefillSpan(start=row, end=row + n, cold=cold, full=full, sliding=sliding)
