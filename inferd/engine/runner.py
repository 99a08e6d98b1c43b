"""Turns a scheduled batch into one forward pass and the logits to sample (or,
where every sampling request needs only its argmax and the head finds it as it
computes, the tokens themselves).

Rows are ordered decodes first (one token each, grouped by padded context
length), then prefill chunks. A request verifying speculative drafts
computes its last token plus the drafts as decode rows, one per token, each
attending its own context through the decode path, and gets logits for
each. In a step that verifies, or prefills beside its decodes, every decode
row is marked a lone decode row (`arch/decode_rows.py`), so its projections
run as in a step of one row:
with a model whose layers honour that (the GGUF's own blocks), verified
tokens are bit for bit those plain decoding computes. The KV cache is one
(K, V) pair per layer, each [num_blocks * block_size, kv_heads, head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from inferd.arch.attention import AttentionMetadata, ContextView, DecodeGroup, PrefillSpan, prefill_rows_native
from inferd.arch.base import CausalLM
from inferd.arch.decode_rows import lone_decode_rows
from inferd.engine.request import Request
from inferd.engine.scheduler import ScheduledBatch


@dataclass
class StepResult:
    logits: torch.Tensor | None  # [N, V] float32: per sampling request one row, plus one per draft token
    sampling: list[Request]  # in logits row order
    token_ids: list[int] | None = None  # instead of logits: each request's argmax (-1: no finite maximum)


# Decode contexts are padded to a multiple of this many tokens.
DECODE_BUCKET = 64
# A prefill chunk's rows attend as decode rows while (rows x keys a row may see) stays within
# this: their slots and masks take 12 bytes a pair (12 MB here), and past ~1,024 rows torch's
# fused kernel, which skips whole blocks a causal mask hides, is as fast.
ROW_ATTENTION_PAIRS = 1 << 20


def _bucket(context_len: int) -> int:
    return -(-context_len // DECODE_BUCKET) * DECODE_BUCKET


def _token_at(req: Request, position: int) -> int:
    prompt = req.prompt_token_ids
    return prompt[position] if position < len(prompt) else req.output_token_ids[position - len(prompt)]


def kv_cache_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The KV cache's dtype: the engine's, but bf16 where a CPU engine computes in
    float32 (a CPU without native bf16). Half the memory, and decode attention
    runs in inferd's kernel, which reads bf16 rows and sums in float32 (llama.cpp
    keeps an f16 cache the same way)."""
    return torch.bfloat16 if device.type == "cpu" and dtype == torch.float32 else dtype


class ModelRunner:
    def __init__(self, model: CausalLM, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device,
                 kv_dtype: torch.dtype | None = None):
        """`kv_dtype`: the cache's dtype where not `kv_cache_dtype`'s choice (a float32 cache
        for a test of the float32 arithmetic)."""
        cfg = model.cfg
        self.model = model
        self.block_size = block_size
        self.device = device
        self.window = cfg.sliding_window if any(cfg.is_sliding(i) for i in range(cfg.num_layers)) else None
        shape = (num_blocks * block_size, cfg.num_kv_heads, cfg.head_dim)
        compute_dtype, dtype = dtype, kv_dtype or kv_cache_dtype(dtype, device)
        self.rows_attention = prefill_rows_native(compute_dtype, dtype, device)
        # Uninitialized: a slot is always written before attention reads it
        # (padding reads clamp to a written slot), and untouched pages of a
        # large pool cost no memory until sequences reach them.
        self.kv_caches = [
            (torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device))
            for _ in range(cfg.num_layers)
        ]

    @staticmethod
    def kv_bytes_per_token(model: CausalLM, dtype: torch.dtype, device: torch.device) -> int:
        cfg = model.cfg
        bits = torch.finfo(kv_cache_dtype(dtype, device)).bits
        return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * bits // 8

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch, argmax_only: Callable[[list[Request]], bool] | None = None) -> StepResult:
        """The step's forward pass. Where `argmax_only(sampling)` says the sampling requests
        need only their logits' argmax, and the head can find it as it computes, the
        result holds their tokens and no logits."""
        decodes: list[tuple[Request, int, int]] = []  # (request, position, token) per decode row
        prefills: list[tuple[Request, int]] = []
        for req, n in zip(batch.requests, batch.num_new_tokens):
            if n == 1 or req.draft_token_ids:  # a decode, or a verification: its last token plus the drafts
                start = req.num_computed_tokens
                tokens = [_token_at(req, start), *req.draft_token_ids][:n]
                decodes.extend((req, start + i, token) for i, token in enumerate(tokens))
            else:
                prefills.append((req, n))
        decodes.sort(key=lambda row: _bucket(row[1] + 1))  # stable: a request's rows keep their order
        token_ids: list[int] = []
        positions: list[int] = []
        slots: list[torch.Tensor] = []
        decode_ctx: list[int] = []  # context length of each decode row
        decode_tables: list[list[int]] = []
        rows_of: dict[str, list[int]] = {}  # a decode request's rows, in token order
        for req, pos, token in decodes:
            rows_of.setdefault(req.request_id, []).append(len(token_ids))
            token_ids.append(token)
            positions.append(pos)
            decode_ctx.append(pos + 1)
            decode_tables.append(req.block_table)
        if decodes:
            size = self.block_size
            slots.append(torch.tensor([req.block_table[pos // size] * size + pos % size for req, pos, _ in decodes],
                                      dtype=torch.int64))
        sample_rows: list[int] = []
        sampling: list[Request] = []
        for req in batch.requests:  # one row, or one per verified position; not a 1-token chunk inside the prompt
            if req.request_id in rows_of and req.num_computed_tokens + len(rows_of[req.request_id]) \
                    == req.num_tokens + len(req.draft_token_ids):
                sample_rows.extend(rows_of[req.request_id])
                sampling.append(req)
        # Decode rows run as lone rows when the step verifies drafts, or prefills beside them:
        # a request's tokens then never depend on another request's prompt sharing its step.
        verifies = any(req.draft_token_ids for req, _, _ in decodes)
        lone_logits = len(sample_rows) if verifies or prefills else 0
        spans: list[PrefillSpan] = []
        for req, n in prefills:
            start = req.num_computed_tokens
            table = torch.tensor(req.block_table, dtype=torch.int64)
            row = len(token_ids)
            token_ids.extend(req.all_token_ids[start : start + n])
            pos = torch.arange(start, start + n)
            positions.extend(pos.tolist())
            slots.append(self._slots(table, pos))
            spans.append(self._prefill_span(row, start, n, table))
            if start + n == req.num_tokens:
                sample_rows.append(row + n - 1)
                sampling.append(req)
        meta = AttentionMetadata(slot_mapping=torch.cat(slots).to(self.device), prefills=spans)
        meta.decodes = self._decode_groups(decode_ctx, decode_tables)
        ids = torch.tensor(token_ids, dtype=torch.int64, device=self.device)
        lone_rows = len(decodes) if lone_logits else 0
        with lone_decode_rows(lone_rows):
            hidden = self.model(ids, torch.tensor(positions, device=self.device), self.kv_caches, meta)
        if not sampling:  # only unfinished prefill chunks this step
            return StepResult(logits=hidden.new_empty((0, 0), dtype=torch.float32), sampling=[])
        last = hidden[torch.tensor(sample_rows, dtype=torch.int64, device=self.device)]
        with lone_decode_rows(lone_logits):
            if argmax_only is not None and not verifies and argmax_only(sampling):
                token_ids = self.model.greedy_tokens(last)
                if token_ids is not None:
                    return StepResult(logits=None, sampling=sampling, token_ids=token_ids)
            return StepResult(logits=self.model.compute_logits(last), sampling=sampling)

    def _slots(self, table: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def _decode_groups(self, ctx: list[int], tables: list[list[int]]) -> list[DecodeGroup]:
        """Runs of decode rows sharing a context width, with their context's slots and masks:
        built in numpy, whose ops on a few hundred values cost a tenth of torch's dispatch."""
        groups = []
        start = 0
        while start < len(ctx):
            width = _bucket(ctx[start])
            end = start
            while end < len(ctx) and _bucket(ctx[end]) == width:
                end += 1
            lengths = np.array(ctx[start:end], dtype=np.int64)
            group_tables = np.zeros((end - start, max(len(t) for t in tables[start:end])), dtype=np.int64)
            for row, table in enumerate(tables[start:end]):  # each row's table, padded with block 0
                group_tables[row, :len(table)] = table
            full = self._gather_view(group_tables, lengths, np.zeros_like(lengths), width)
            sliding = None  # the full view serves sliding layers too: a window wider than the group's
            if self.window is not None and width > self.window:
                starts = np.maximum(lengths - self.window, 0)
                sliding = self._gather_view(group_tables, lengths, starts, min(self.window, width))
            groups.append(DecodeGroup(start, end, full, sliding))
            start = end
        return groups

    def _gather_view(self, tables: np.ndarray, lengths: np.ndarray, starts: np.ndarray, width: int) -> ContextView:
        """The slots and mask of B rows' context windows; `tables` [B, blocks], each row's table padded."""
        pos = starts[:, None] + np.arange(width, dtype=np.int64)[None, :]  # [B, width]
        mask = np.where(pos >= lengths[:, None], np.float32(-np.inf), np.float32(0))
        pos = np.minimum(pos, (lengths - 1)[:, None])  # within each row's own blocks, never the padding
        block, offset = np.divmod(pos, self.block_size)
        slots = tables[np.arange(len(tables))[:, None], block] * self.block_size + offset
        return ContextView(slots=torch.from_numpy(slots).to(self.device),
                           mask=torch.from_numpy(mask)[:, None, None, :].to(self.device))

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
        rows = None
        if self.rows_attention and n * length <= ROW_ATTENTION_PAIRS:
            rows = self._span_rows(row, start, n, table)
        return PrefillSpan(start=row, end=row + n, cold=cold, full=full, sliding=sliding, rows=rows)

    def _span_rows(self, row: int, start: int, n: int, table: torch.Tensor) -> DecodeGroup:
        """A prefill chunk as decode rows: its row i sees positions up to start + i (on sliding layers,
        the window's last ones)."""
        lengths = np.arange(start + 1, start + n + 1, dtype=np.int64)
        tables = np.broadcast_to(table.numpy(), (n, table.shape[0]))
        full = self._gather_view(tables, lengths, np.zeros_like(lengths), start + n)
        sliding = None
        if self.window is not None and start + n > self.window:
            sliding = self._gather_view(tables, lengths, np.maximum(lengths - self.window, 0), self.window)
        return DecodeGroup(row, row + n, full, sliding)
