"""Continuous batching over the paged block pool.

Each step the scheduler hands out a token budget:
1. running requests first (a decode costs one token; an unfinished prefill
   takes the next chunk), in admission order; when the pool runs dry the
   lowest-priority, latest-arriving running request is preempted (its blocks
   freed; it is recomputed later, usually from its own cached prefix);
2. then waiting requests, by (priority, arrival), while a sequence slot, the
   budget and blocks allow. A new request first takes its cached prefix.
A long prompt therefore delays running decodes by at most one chunk.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from inferd.engine.errors import QueueFullError, RequestRejected
from inferd.engine.kv_cache import BlockPool
from inferd.engine.request import Request, RequestStatus
from inferd.prefix_hash import prefix_block_hashes, root_hash


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096
    max_queue: int = 256
    block_size: int = 16


@dataclass
class ScheduledBatch:
    requests: list[Request] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requests)


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool):
        self.config = config
        self.pool = pool
        self.waiting: list[Request] = []  # sorted by Request.sort_key
        self.running: list[Request] = []
        self.num_preemptions = 0

    # -- admission ---------------------------------------------------------
    def add(self, req: Request) -> None:
        """Queue a request that passed `check_fits`."""
        if len(self.waiting) >= self.config.max_queue:
            raise QueueFullError(f"the waiting queue is full ({self.config.max_queue} requests, --max-queue)")
        self._enqueue(req)

    def check_fits(self, prompt_len: int, max_tokens: int | None) -> None:
        ctx = self.config.max_model_len
        if prompt_len == 0:
            raise RequestRejected("the prompt is empty; send at least one token")
        if prompt_len >= ctx:
            raise RequestRejected(
                f"the prompt has {prompt_len} tokens but the context size is {ctx} (--ctx-size); "
                f"shorten the prompt to at most {ctx - 1} tokens"
            )
        if max_tokens is not None and prompt_len + max_tokens > ctx:
            raise RequestRejected(
                f"the context size is {ctx} tokens (--ctx-size), but {prompt_len + max_tokens} were requested "
                f"({prompt_len} in the prompt, {max_tokens} to generate); lower max_tokens to at most {ctx - prompt_len}"
            )

    def _enqueue(self, req: Request) -> None:
        bisect.insort(self.waiting, req, key=Request.sort_key)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- one step ----------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        budget = self.config.max_num_batched_tokens
        batch = ScheduledBatch()
        for req in list(self.running):
            if budget == 0:
                break
            if req.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            if req.draft_token_ids:
                self._fit_drafts(req, budget)
            num_new = min(req.num_tokens + len(req.draft_token_ids) - req.num_computed_tokens, budget)
            while not self._reserve(req, num_new):
                victim = max(self.running, key=Request.sort_key)
                if victim in batch.requests:  # already given tokens this step: take them back
                    i = batch.requests.index(victim)
                    budget += batch.num_new_tokens.pop(i)
                    batch.requests.pop(i)
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is req:
                    break
            if req.status is RequestStatus.RUNNING:
                batch.requests.append(req)
                batch.num_new_tokens.append(num_new)
                budget -= num_new
        # Admit new work only on a step that did not have to preempt.
        while self.waiting and not batch.preempted and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            if not req.block_table:
                self._take_cached_prefix(req)
            num_new = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self._reserve(req, num_new):
                self._release(req)
                break
            self.waiting.pop(0)
            req.status = RequestStatus.RUNNING
            req.slot = self._free_slot()
            self.running.append(req)
            batch.requests.append(req)
            batch.num_new_tokens.append(num_new)
            budget -= num_new
        return batch

    def _fit_drafts(self, req: Request, budget: int) -> None:
        """Trim speculative drafts to the budget and to the free blocks less one per running
        request (each decode's next block), so drafts do not cause preemptions."""
        bs = self.pool.block_size
        slots = (len(req.block_table) + self.pool.num_free - len(self.running)) * bs - req.num_tokens
        keep = max(0, min(len(req.draft_token_ids), budget - 1, slots))
        del req.draft_token_ids[keep:]

    def _take_cached_prefix(self, req: Request) -> None:
        if not req.cache_prompt:
            return
        tokens = req.all_token_ids
        # At least one token must be computed to produce logits, so the last
        # block is recomputed when the whole sequence is cached.
        bs = self.pool.block_size
        hashes = prefix_block_hashes(tokens[: ((len(tokens) - 1) // bs) * bs], bs, parent=root_hash(req.cache_salt))
        blocks = self.pool.match_prefix(hashes)
        req.block_table = blocks
        req.block_hashes = hashes[: len(blocks)]
        req.num_cached_blocks = len(blocks)
        req.num_computed_tokens = len(blocks) * bs
        if req.num_preemptions == 0:
            req.num_cached_tokens = req.num_computed_tokens

    def _reserve(self, req: Request, num_new: int) -> bool:
        bs = self.pool.block_size
        needed = -(-(req.num_computed_tokens + num_new) // bs) - len(req.block_table)
        if needed > self.pool.num_free:
            return False
        if needed > 0:
            req.block_table.extend(self.pool.allocate(needed))
        return True

    def _free_slot(self) -> int:
        taken = {r.slot for r in self.running}
        return next(i for i in range(self.config.max_num_seqs) if i not in taken)

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        req.slot = None
        self._release(req)
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self._enqueue(req)

    def _release(self, req: Request) -> None:
        """Give back every block; the tail goes first so the prefix stays cached longest."""
        self.pool.free_blocks(req.block_table[::-1])
        req.block_table = []
        req.block_hashes = []
        req.num_cached_blocks = 0
        req.num_computed_tokens = 0
        req.draft_token_ids = []

    # -- after the forward pass ---------------------------------------------
    def advance(self, batch: ScheduledBatch) -> None:
        """Record computed tokens and donate newly full blocks to the cache.
        Speculative drafts count only once accepted (`accept_draft`)."""
        for req, n in zip(batch.requests, batch.num_new_tokens):
            self._commit(req, n - len(req.draft_token_ids))

    def accept_draft(self, req: Request) -> None:
        """The next draft became an output token, and the request goes on: its KV counts as computed."""
        self._commit(req, 1)

    def end_verification(self, req: Request) -> None:
        """Drafts not accepted are dropped (their KV slots are overwritten later) and
        blocks past the next token's are freed."""
        req.draft_token_ids = []
        if req.status is not RequestStatus.RUNNING:
            return  # finished meanwhile: its blocks are gone already
        keep = -(-(req.num_computed_tokens + 1) // self.pool.block_size)
        if len(req.block_table) > keep:
            self.pool.free_blocks(req.block_table[keep:][::-1])
            del req.block_table[keep:]

    def _commit(self, req: Request, n: int) -> None:
        bs = self.pool.block_size
        req.num_computed_tokens += n
        if not req.cache_prompt:
            return
        full = req.num_computed_tokens // bs  # only ever tokens that are in the sequence
        if full > req.num_cached_blocks:
            parent = req.block_hashes[-1] if req.block_hashes else root_hash(req.cache_salt)
            tokens = req.all_token_ids[: full * bs]
            new = prefix_block_hashes(tokens, bs, start=req.num_cached_blocks, parent=parent)
            for i, h in enumerate(new, start=req.num_cached_blocks):
                self.pool.cache_block(req.block_table[i], h)
            req.block_hashes.extend(new)
            req.num_cached_blocks = full

    def finish(self, req: Request, status: RequestStatus) -> None:
        """End a request wherever it is; its blocks are freed at once."""
        if req in self.running:
            self.running.remove(req)
            req.slot = None
        elif req in self.waiting:
            self.waiting.remove(req)
        self._release(req)
        req.status = status
