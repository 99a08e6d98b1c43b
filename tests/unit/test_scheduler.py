"""Scheduler: admission, chunking, prefix reuse, preemption and priority,
driven without a model (tokens are "computed" by calling advance)."""

import pytest

from inferd.engine.engine_request import Priority
from inferd.engine.errors import QueueFullError, RequestRejected
from inferd.engine.kv_cache import BlockPool
from inferd.engine.request import Request, RequestStatus
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.scheduler import Scheduler, SchedulerConfig


def make(num_blocks=16, block_size=4, **kw):
    cfg = SchedulerConfig(block_size=block_size, **kw)
    return Scheduler(cfg, BlockPool(num_blocks, block_size))


def req(rid, n, priority=Priority.NORMAL, max_tokens=8, first=0, cache=True, salt=None):
    return Request(rid, list(range(first, first + n)), SamplingParams(max_tokens=max_tokens),
                   priority=priority, cache_prompt=cache, cache_salt=salt)


def step(s):
    """Schedule, mark computed, and append a token to every request that finished its prompt."""
    batch = s.schedule()
    s.advance(batch)
    for r in batch.requests:
        if r.num_computed_tokens == r.num_tokens:
            r.output_token_ids.append(99)
    return batch


def test_long_prompt_is_chunked_by_the_token_budget():
    s = make(max_num_batched_tokens=8)
    r = req("a", 20)
    s.add(r)
    assert step(s).num_new_tokens == [8]
    assert step(s).num_new_tokens == [8]
    assert step(s).num_new_tokens == [4]
    assert r.output_token_ids == [99]
    assert step(s).num_new_tokens == [1]  # decode


def test_running_decodes_go_first_and_a_new_prompt_gets_the_rest():
    s = make(max_num_batched_tokens=8)
    a = req("a", 4)
    s.add(a)
    step(s)
    b = req("b", 30, first=100)
    s.add(b)
    batch = step(s)
    assert batch.requests == [a, b] and batch.num_new_tokens == [1, 7]


def test_max_num_seqs_bounds_running():
    s = make(max_num_seqs=2)
    rs = [req(str(i), 4, first=10 * i) for i in range(3)]
    for r in rs:
        s.add(r)
    batch = step(s)
    assert batch.requests == rs[:2]
    assert s.waiting == [rs[2]]


def test_waiting_queue_orders_by_priority_then_arrival():
    s = make(max_num_seqs=1)
    low = req("low", 4, Priority.LOW)
    n1 = req("n1", 4)
    high = req("high", 4, Priority.HIGH)
    n2 = req("n2", 4)
    for r in (low, n1, high, n2):
        s.add(r)
    assert [r.request_id for r in s.waiting] == ["high", "n1", "n2", "low"]


def test_queue_bound():
    s = make(max_queue=1)
    s.add(req("a", 4))
    with pytest.raises(QueueFullError):
        s.add(req("b", 4))


def test_prompt_that_cannot_fit_is_refused_with_numbers():
    s = make(max_model_len=32)
    with pytest.raises(RequestRejected, match=r"40 tokens.*context size is 32"):
        s.check_fits(40, 8)
    with pytest.raises(RequestRejected, match=r"lower max_tokens to at most 12"):
        s.check_fits(20, 30)
    with pytest.raises(RequestRejected, match="the prompt is empty"):
        s.check_fits(0, 8)


def test_prefix_hit_skips_cached_blocks_and_counts_cached_tokens():
    s = make()
    a = req("a", 10)
    s.add(a)
    step(s)
    a_blocks = list(a.block_table)
    s.finish(a, RequestStatus.FINISHED_STOPPED)
    b = req("b", 13)  # same first 10 tokens
    s.add(b)
    batch = step(s)
    assert b.num_cached_tokens == 8  # two full blocks of 4
    assert batch.num_new_tokens == [5]
    assert b.block_table[:2] == a_blocks[:2]


def test_requests_with_different_salts_share_no_cached_blocks():
    s = make(num_blocks=32)
    a, b = req("a", 13, salt="tenant-a"), req("b", 13, salt="tenant-b")
    s.add(a)
    s.add(b)
    step(s)  # both prompts computed side by side, each donating its three full blocks
    assert not set(a.block_table) & set(b.block_table) and not set(a.block_hashes) & set(b.block_hashes)
    assert len(s.pool.cached) == 6
    a_hashes = list(a.block_hashes)
    for r in (a, b):
        s.finish(r, RequestStatus.FINISHED_STOPPED)
    unsalted, again = req("c", 13), req("d", 13, salt="tenant-a")
    s.add(unsalted)
    step(s)
    assert unsalted.num_cached_tokens == 0  # no salt is a salt of its own
    s.add(again)
    step(s)
    assert again.num_cached_tokens == 12 and again.block_hashes == a_hashes


def test_fully_cached_prompt_recomputes_its_last_block():
    s = make()
    a = req("a", 8)
    s.add(a)
    step(s)
    first_blocks = list(a.block_table)
    s.finish(a, RequestStatus.FINISHED_STOPPED)
    b = req("b", 8)
    s.add(b)
    batch = step(s)
    assert b.num_cached_tokens == 4 and batch.num_new_tokens == [4]
    assert b.block_table[0] == first_blocks[0] and b.block_table[1] != first_blocks[1]


def test_cache_prompt_false_neither_reads_nor_donates():
    s = make()
    a = req("a", 8, cache=False)
    s.add(a)
    step(s)
    assert s.pool.cached == {}
    s.finish(a, RequestStatus.FINISHED_STOPPED)
    b = req("b", 9)
    s.add(b)
    step(s)
    c = req("c", 9, cache=False)
    s.add(c)
    step(s)
    assert c.num_cached_tokens == 0 and b.num_cached_tokens == 0


def test_preemption_frees_blocks_and_the_victim_resumes_later():
    # 4 blocks of 4 tokens; two sequences of 7 tokens need 2 blocks each, then a third each.
    s = make(num_blocks=4, max_num_batched_tokens=64)
    a, b = req("a", 7, max_tokens=20), req("b", 7, first=50, max_tokens=20)
    s.add(a)
    s.add(b)
    step(s)  # both prefilled: 7 computed + 1 sampled, 2 blocks each, pool empty
    assert step(s).preempted == []  # position 7 still fits the second block
    batch = step(s)  # position 8: a needs a 3rd block -> b (latest arrival) is preempted
    assert batch.preempted == [b]
    assert batch.requests == [a]
    assert b.status is RequestStatus.PREEMPTED and b.block_table == [] and b.num_computed_tokens == 0
    assert s.waiting == [b]
    assert b.output_token_ids == [99, 99]  # kept: recompute covers prompt + output
    s.finish(a, RequestStatus.FINISHED_STOPPED)
    batch = step(s)
    assert batch.requests == [b] and b.status is RequestStatus.RUNNING
    # b's blocks were freed tail first; a's new block evicted b's second block,
    # so the recompute reuses only the first: 9 tokens - 4 cached = 5 to compute.
    assert b.num_cached_tokens == 0 and batch.num_new_tokens == [5]


def test_finish_frees_every_block():
    s = make()
    rs = [req(str(i), 6, first=10 * i, cache=False) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)
    step(s)
    for r in rs:
        s.finish(r, RequestStatus.FINISHED_ABORTED)
    assert s.pool.num_free == s.pool.num_blocks
    assert not s.running and not s.waiting
