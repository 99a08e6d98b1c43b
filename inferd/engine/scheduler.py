"""Continuous batching over the paged block pool, with priorities.

Each step the scheduler hands out a token budget:
1. running requests first (a decode costs one token; an unfinished prefill
   takes the next chunk), most urgent first (priority, then arrival); when
   the pool runs dry the lowest-priority, latest-arriving running request is
   preempted (its blocks freed; it is recomputed later, usually from its own
   cached prefix);
2. then waiting requests, by (priority, arrival), while a sequence slot, the
   budget and blocks allow. A new request first takes its cached prefix. One
   that finds no slot or no blocks takes them from running requests of lower
   priority, latest arrival first: they are preempted as above, so an
   interactive request starts on the next step even when batch work fills
   the engine.
Low-priority (background) prefill is chunked to `background_tokens` per
step in all (a sixteenth of the budget), so an urgent request never waits
behind more than that, and it pauses while a more urgent request has prompt
left to compute, so an interactive prefill shares its step with background
decodes only. A long prompt therefore delays running decodes by at most one
chunk. With nothing above low priority running or waiting, the chunk is
`alone_tokens` (a quarter of the budget): a batch alone keeps the engine
nearly as busy as interactive work would, and a request that arrives then
waits behind one such chunk at most.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from inferd.engine.engine_request import Priority
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
    # low-priority prefill tokens per step, all such requests together; None: a sixteenth of the budget
    background_tokens: int | None = None
    # the same while every request running or waiting is low priority; None: a quarter of the budget
    alone_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.background_tokens is None:
            self.background_tokens = max(1, self.max_num_batched_tokens // 16)
        if self.alone_tokens is None:
            self.alone_tokens = max(self.background_tokens, self.max_num_batched_tokens // 4)


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
        self._background_left = self._background_allowance()
        batch = ScheduledBatch()
        self.running.sort(key=Request.sort_key)
        for req in list(self.running):
            if budget == 0:
                break
            if req.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            if req.draft_token_ids:
                self._fit_drafts(req, budget)
            num_new = self._chunk(req, budget)
            if num_new == 0:
                continue  # background prefill waits for the next step; decodes still run
            while not self._reserve(req, num_new):
                victim = max(self.running, key=Request.sort_key)
                budget += self._preempt(victim, batch)
                if victim is req:
                    break
            if req.status is RequestStatus.RUNNING:
                budget -= self._give(req, num_new, batch)
        # Admit new work only on a step whose running requests had the blocks they needed.
        may_admit = not batch.preempted
        while self.waiting and may_admit and budget > 0:
            req = self.waiting[0]
            if len(self.running) >= self.config.max_num_seqs:
                victim = self._lower_than(req)
                if victim is None:
                    break
                budget += self._preempt(victim, batch)
                continue
            if not req.block_table:
                self._take_cached_prefix(req)
            num_new = self._chunk(req, budget)
            if num_new == 0:
                self._release(req)
                break  # background, and so is everything behind it
            if not self._reserve(req, num_new):
                victim = self._lower_than(req) if self._could_fit(req, num_new) else None
                self._release(req)
                if victim is None:
                    break
                budget += self._preempt(victim, batch)
                continue
            self.waiting.pop(0)
            req.status = RequestStatus.RUNNING
            req.slot = self._free_slot()
            self.running.append(req)
            budget -= self._give(req, num_new, batch)
        return batch

    def _background_allowance(self) -> int:
        """Low-priority prefill tokens this step: none while an urgent prompt is computed, more while
        only low-priority work is there."""
        if self._urgent_prefill():
            return 0
        if all(r.priority is Priority.LOW for r in (*self.running, *self.waiting)):
            return self.config.alone_tokens
        return self.config.background_tokens

    def _urgent_prefill(self) -> bool:
        """Whether a request above low priority has prompt left to compute (or waits to start)."""
        if self.waiting and self.waiting[0].priority < Priority.LOW:  # sorted: the most urgent first
            return True
        return any(
            r.priority < Priority.LOW and r.num_computed_tokens + 1 < r.num_tokens for r in self.running)

    def _chunk(self, req: Request, budget: int) -> int:
        """The tokens `req` may compute this step: what it has left, within the budget; background
        prefill also within what is left of `background_tokens` (speculative drafts are never cut)."""
        num_new = min(req.num_tokens + len(req.draft_token_ids) - req.num_computed_tokens, budget)
        if self._is_background_prefill(req):
            num_new = min(num_new, self._background_left)
        return num_new

    @staticmethod
    def _is_background_prefill(req: Request) -> bool:
        """Low priority with more than its next token to compute (a prompt, or a recompute)."""
        return req.priority is Priority.LOW and not req.draft_token_ids and req.num_computed_tokens + 1 < req.num_tokens

    def _give(self, req: Request, num_new: int, batch: ScheduledBatch) -> int:
        batch.requests.append(req)
        batch.num_new_tokens.append(num_new)
        if self._is_background_prefill(req):
            self._background_left -= num_new
        return num_new

    def _lower_than(self, req: Request) -> Request | None:
        """The running request to preempt for `req`: the least urgent of lower priority, if any."""
        lower = [r for r in self.running if r.priority > req.priority]
        return max(lower, key=Request.sort_key) if lower else None

    def _could_fit(self, req: Request, num_new: int) -> bool:
        """Whether preempting every lower-priority running request would free blocks enough for `req`
        (a bound: shared blocks free nothing), so none is preempted in vain."""
        bs = self.pool.block_size
        needed = -(-(req.num_computed_tokens + num_new) // bs) - len(req.block_table)
        freeable = sum(len(r.block_table) for r in self.running if r.priority > req.priority)
        return needed <= self.pool.num_free + freeable

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

    def _preempt(self, req: Request, batch: ScheduledBatch) -> int:
        """Back to the waiting queue, its blocks freed (still cached) for recompute later; returns the
        tokens it had been given earlier in this step."""
        given = 0
        if req in batch.requests:
            i = batch.requests.index(req)
            batch.requests.pop(i)
            given = batch.num_new_tokens.pop(i)
            if self._is_background_prefill(req):
                self._background_left += given
        batch.preempted.append(req)
        self.running.remove(req)
        req.slot = None
        self._release(req)
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self._enqueue(req)
        return given

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
