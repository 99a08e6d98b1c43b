"""Priority in the scheduler: urgent requests preempt background ones for a
slot or for blocks and start on the same step, background prefill is
chunked, and a preempted-and-resumed request gives the tokens an
uninterrupted run gives (greedy, on a tiny model)."""

from __future__ import annotations

import pytest

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest, Priority
from inferd.engine.kv_cache import BlockPool
from inferd.engine.request import Request, RequestStatus
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.scheduler import Scheduler, SchedulerConfig
from inferd.models.loader import load_model

LOW, NORMAL, HIGH = Priority.LOW, Priority.NORMAL, Priority.HIGH


def make(num_blocks=32, block_size=4, **kw):
    return Scheduler(SchedulerConfig(block_size=block_size, **kw), BlockPool(num_blocks, block_size))


def req(rid, n, priority=NORMAL, first=0):
    return Request(rid, list(range(first, first + n)), SamplingParams(max_tokens=50), priority=priority)


def step(s):
    batch = s.schedule()
    s.advance(batch)
    for r in batch.requests:
        if r.num_computed_tokens == r.num_tokens:
            r.output_token_ids.append(99)
    return batch


def test_an_urgent_request_preempts_the_latest_background_one_for_a_slot_and_starts_at_once():
    s = make(max_num_seqs=2)
    b1, b2, b3 = (req(f"b{i}", 6, LOW, first=10 * i) for i in range(1, 4))
    for r in (b1, b2, b3):
        s.add(r)
    step(s)
    step(s)
    assert s.running == [b1, b2] and s.waiting == [b3]
    urgent = req("u", 5, first=100)
    s.add(urgent)
    batch = step(s)
    assert batch.preempted == [b2]
    assert batch.requests == [b1, urgent] and batch.num_new_tokens == [1, 5]
    assert urgent.slot == 1 and b2.slot is None and b2.status is RequestStatus.PREEMPTED
    assert s.waiting == [b2, b3]  # the victim resumes before later background work
    assert b2.output_token_ids == [99, 99]


def test_the_victim_resumes_from_its_cached_blocks_once_a_slot_frees():
    s = make(max_num_seqs=1)
    b = req("b", 9, LOW)
    s.add(b)
    step(s)  # 9 prompt tokens: two full blocks cached
    step(s)
    urgent = req("u", 3, first=100)
    s.add(urgent)
    step(s)
    s.finish(urgent, RequestStatus.FINISHED_STOPPED)
    batch = step(s)
    assert batch.requests == [b]
    # 11 tokens (9 + 2 out): two blocks still cached, the last 3 recomputed
    assert batch.num_new_tokens == [3] and b.num_preemptions == 1


def test_equal_priority_never_preempts_for_admission():
    s = make(max_num_seqs=1)
    a, b = req("a", 4), req("b", 4, first=50)
    s.add(a)
    step(s)
    s.add(b)
    batch = step(s)
    assert batch.preempted == [] and batch.requests == [a] and s.waiting == [b]


def test_background_never_preempts_urgent_work():
    s = make(max_num_seqs=1)
    u, b = req("u", 4), req("b", 4, LOW, first=50)
    s.add(u)
    step(s)
    s.add(b)
    assert step(s).preempted == [] and s.running == [u]


def test_an_urgent_request_takes_blocks_from_background_work():
    # 6 blocks of 4: two background requests hold 3 each; the urgent prompt needs 2.
    s = make(num_blocks=6, max_num_seqs=4, background_tokens=64)
    b1, b2 = req("b1", 10, LOW), req("b2", 10, LOW, first=50)
    s.add(b1)
    s.add(b2)
    step(s)
    assert s.pool.num_free == 0
    urgent = req("u", 6, first=100)
    s.add(urgent)
    batch = step(s)
    assert batch.preempted == [b2] and urgent in batch.requests and s.running == [b1, urgent]


def test_no_background_request_is_preempted_in_vain():
    s = make(num_blocks=6, max_num_seqs=4, max_model_len=64)
    b = req("b", 10, LOW)
    s.add(b)
    step(s)
    big = req("big", 30, first=100)  # 8 blocks: more than the whole pool
    s.add(big)
    batch = step(s)
    assert batch.preempted == [] and s.running == [b] and s.waiting == [big]


def test_background_prefill_is_chunked_in_all_but_decodes_and_urgent_prefill_are_not():
    s = make(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=256, background_tokens=8, alone_tokens=8)
    b1, b2 = req("b1", 12, LOW), req("b2", 12, LOW, first=50)
    s.add(b1)
    s.add(b2)
    batch = step(s)
    assert batch.requests == [b1] and batch.num_new_tokens == [8]  # b2 was not admitted: nothing left
    batch = step(s)
    assert batch.requests == [b1, b2] and batch.num_new_tokens == [4, 4]
    batch = step(s)
    assert batch.requests == [b1, b2] and batch.num_new_tokens == [1, 8]
    b3 = req("b3", 30, LOW, first=150)
    s.add(b3)
    batch = step(s)
    assert batch.requests == [b1, b2, b3] and batch.num_new_tokens == [1, 1, 8]  # decodes are not background prefill
    urgent = req("u", 40, first=200)
    s.add(urgent)
    batch = step(s)  # while an urgent prompt is computed, background prefill pauses; its decodes go on
    assert batch.requests == [b1, b2, urgent] and batch.num_new_tokens == [1, 1, 40]
    batch = step(s)
    assert batch.requests == [urgent, b1, b2, b3] and batch.num_new_tokens == [1, 1, 1, 8]


def test_background_prefill_takes_a_quarter_of_the_budget_alone_and_a_sixteenth_beside_other_work():
    s = make(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64)
    b = req("b", 60, LOW)
    s.add(b)
    assert step(s).num_new_tokens == [16]  # alone: a quarter
    n = req("n", 1, first=100)  # a normal request with its prompt computed in one step, then decoding
    s.add(n)
    batch = step(s)  # n waits to start: b pauses
    assert batch.requests == [n] and batch.num_new_tokens == [1]
    batch = step(s)  # n decodes beside it: a sixteenth
    assert batch.requests == [n, b] and batch.num_new_tokens == [1, 4]
    s.finish(n, RequestStatus.FINISHED_STOPPED)
    assert step(s).num_new_tokens == [16]  # alone again


def test_running_requests_go_most_urgent_first():
    s = make(num_blocks=64, max_num_seqs=4, max_num_batched_tokens=32, alone_tokens=2)
    b = req("b", 40, LOW)
    s.add(b)
    assert step(s).num_new_tokens == [2]
    u = req("u", 60, first=100)
    s.add(u)
    batch = step(s)  # u waits: b's prefill pauses, u is admitted
    assert batch.requests == [u] and batch.num_new_tokens == [32]
    s.config.background_tokens = 32
    batch = step(s)  # both running, u first: the budget is spent before b's turn
    assert batch.requests == [u] and batch.num_new_tokens == [28]


# -- exact output across a preemption, on the tiny model ---------------------

@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def prompt(n: int, start: int = 3) -> list[int]:
    return [2] + [(start + 7 * i) % 250 + 3 for i in range(n - 1)]


def drain(engine: Engine, tokens: dict[str, list[int]]) -> None:
    for out in engine.step():
        tokens.setdefault(out.request_id, []).extend(out.token_ids)


@pytest.mark.parametrize("cache_prompt", [True, False])
def test_a_preempted_and_resumed_background_request_gives_the_uninterrupted_tokens(loaded, cache_prompt):
    greedy = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    config = {"ctx_size": 128, "parallel": 1, "block_size": 4, "max_batched_tokens": 64}

    alone = Engine(loaded, EngineConfig(**config))
    tokens: dict[str, list[int]] = {}
    alone.add_request(EngineRequest("b", prompt(11), greedy, priority=LOW, cache_prompt=cache_prompt))
    while alone.has_work:
        drain(alone, tokens)

    engine = Engine(loaded, EngineConfig(**config))
    mixed: dict[str, list[int]] = {}
    engine.add_request(EngineRequest("b", prompt(11), greedy, priority=LOW, cache_prompt=cache_prompt))
    for _ in range(4):
        drain(engine, mixed)
    engine.add_request(EngineRequest("u", prompt(7, start=40), SamplingParams(max_tokens=3, temperature=0.0,
                                                                              ignore_eos=True)))
    drain(engine, mixed)
    assert engine.stats().preemptions == 1 and len(mixed["u"]) == 1  # started on the step it arrived
    while engine.has_work:
        drain(engine, mixed)
    assert mixed["b"] == tokens["b"] and len(mixed["b"]) == 10
    assert engine.pool.num_used == 0
