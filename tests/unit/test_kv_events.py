"""KV-cache events: the pool reports exact hashes, the hub publishes one
net update per step, a snapshot plus the updates after it equal the cache,
and a reader that falls behind is dropped."""

from __future__ import annotations

import asyncio
import json

import pytest

from inferd.config import EngineConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.errors import EngineDeadError
from inferd.engine.kv_cache import BlockPool
from inferd.engine.kv_events import KvEventHub, KvEventLog, KvSnapshot, KvUpdate
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model
from inferd.prefix_hash import prefix_block_hashes, root_hash
from inferd.router.kv_index import KvIndex

BLOCK_SIZE = 4


def fake_hash(n: int) -> str:
    """A stand-in block hash: the pool and the hub treat hashes as opaque."""
    return f"{n:032x}"


class Recorder:
    def __init__(self):
        self.events = []

    def block_stored(self, h):
        self.events.append(("stored", h))

    def block_removed(self, h):
        self.events.append(("removed", h))


def cached_pool(tokens, num_blocks=4, block_size=2):
    """A pool holding `tokens`' full blocks as cached, then freed (tail first)."""
    pool = BlockPool(num_blocks, block_size)
    hashes = prefix_block_hashes(tokens, block_size)
    blocks = pool.allocate(len(hashes))
    for b, h in zip(blocks, hashes):
        pool.cache_block(b, h)
    pool.free_blocks(blocks[::-1])
    return pool, blocks, hashes


# -- the pool's hooks -------------------------------------------------------------


def test_cache_block_reports_the_hash_it_registers_and_only_the_first_copy():
    pool = BlockPool(num_blocks=4, block_size=2)
    pool.listener = rec = Recorder()
    hashes = prefix_block_hashes([1, 2, 3, 4], 2)
    a, b, c = pool.allocate(3)
    pool.cache_block(a, hashes[0])
    pool.cache_block(b, hashes[1])
    pool.cache_block(c, hashes[0])  # already cached in block a: c stays private, nothing to report
    assert rec.events == [("stored", hashes[0]), ("stored", hashes[1])]


def test_eviction_on_allocate_reports_the_evicted_hash_in_lru_order():
    pool, blocks, hashes = cached_pool([1, 2, 3, 4])
    pool.listener = rec = Recorder()
    pool.allocate(3)  # two never-used blocks, then the least recently freed: the tail block
    assert rec.events == [("removed", hashes[1])]
    pool.allocate(1)
    assert rec.events == [("removed", hashes[1]), ("removed", hashes[0])]


def test_reset_reports_every_dropped_hash_in_free_list_order():
    pool, blocks, hashes = cached_pool([1, 2, 3, 4, 5, 6])
    pool.listener = rec = Recorder()
    assert pool.reset_prefix_cache() == 3
    assert rec.events == [("removed", h) for h in hashes[::-1]]  # freed tail first
    assert pool.cached == {}


def test_reset_keeps_the_hashes_of_blocks_in_use_and_reports_none_of_them():
    pool = BlockPool(num_blocks=4, block_size=2)
    hashes = prefix_block_hashes([1, 2, 3, 4], 2)
    blocks = pool.allocate(2)
    for b, h in zip(blocks, hashes):
        pool.cache_block(b, h)
    pool.listener = rec = Recorder()
    assert pool.reset_prefix_cache() == 0
    assert rec.events == []


def test_an_unwatched_pool_behaves_as_before():
    pool, blocks, hashes = cached_pool([1, 2, 3, 4])
    assert pool.listener is None
    assert pool.match_prefix(hashes) == blocks
    assert pool.stats.evictions == 0


# -- the log's net change -----------------------------------------------------------


def test_a_hash_stored_and_removed_within_one_step_cancels_out():
    h1, h2, h3, h4 = map(fake_hash, range(1, 5))
    log = KvEventLog()
    log.block_stored(h1)
    log.block_stored(h2)
    log.block_removed(h1)
    log.block_removed(h3)
    log.block_stored(h3)
    log.block_removed(h4)
    assert log.take() == ([h2], [h4])
    assert log.take() == ([], [])


# -- the hub ------------------------------------------------------------------------
# The test thread plays the engine thread: it calls subscribe/publish itself.


def run(coro):
    return asyncio.run(coro)


def test_a_step_is_one_update_of_its_stored_and_removed_hashes():
    async def go():
        pool, blocks, hashes = cached_pool([1, 2, 3, 4])
        hub = KvEventHub(pool)
        sub = hub.subscribe(asyncio.get_running_loop())
        assert sub.snapshot == KvSnapshot(block_size=2, hashes=hashes, active_blocks=0)
        assert pool.listener is not None
        new = prefix_block_hashes([7, 8], 2)
        (a, b, c) = pool.allocate(3)  # evicts the tail block's hash
        pool.cache_block(a, new[0])
        hub.publish()
        assert await sub.next() == KvUpdate(stored=new, removed=[hashes[1]], active_blocks=3)

    run(go())


def test_a_step_that_changes_nothing_publishes_nothing_but_a_changed_block_count_does():
    async def go():
        pool = BlockPool(num_blocks=4, block_size=2)
        hub = KvEventHub(pool)
        sub = hub.subscribe(asyncio.get_running_loop())
        hub.publish()
        blocks = pool.allocate(2)
        hub.publish()
        pool.free_blocks(blocks)
        hub.publish()
        assert await sub.next() == KvUpdate(stored=[], removed=[], active_blocks=2)
        assert await sub.next() == KvUpdate(stored=[], removed=[], active_blocks=0)
        assert sub.active_blocks == 0
        assert sub._queue.empty()

    run(go())


def test_a_snapshot_between_steps_and_the_updates_after_it_miss_nothing():
    async def go():
        loop = asyncio.get_running_loop()
        pool = BlockPool(num_blocks=8, block_size=2)
        hub = KvEventHub(pool)
        early = hub.subscribe(loop)
        h = prefix_block_hashes([1, 2, 3, 4, 5, 6], 2)
        blocks = pool.allocate(3)
        pool.cache_block(blocks[0], h[0])  # changed, not yet published...
        late = hub.subscribe(loop)  # ...so the early reader gets it now, the late one in its snapshot
        assert late.snapshot.hashes == [h[0]]
        assert await early.next() == KvUpdate(stored=[h[0]], removed=[], active_blocks=3)
        pool.cache_block(blocks[1], h[1])
        pool.cache_block(blocks[2], h[2])
        hub.publish()
        both = KvUpdate(stored=[h[1], h[2]], removed=[], active_blocks=3)
        assert await early.next() == both
        assert await late.next() == both
        assert late._queue.empty() and early._queue.empty()
        assert set(late.snapshot.hashes) | set(both.stored) == set(pool.cached)

    run(go())


def test_a_reader_that_falls_behind_is_dropped_and_the_others_carry_on():
    async def go():
        loop = asyncio.get_running_loop()
        pool = BlockPool(num_blocks=8, block_size=1)
        hub = KvEventHub(pool, max_pending=2)
        slow, fast = hub.subscribe(loop), hub.subscribe(loop)
        seen = []
        for i in range(3):
            pool.cache_block(pool.allocate(1)[0], fake_hash(100 + i))
            hub.publish()
            seen.append(await fast.next())
        assert [u.stored for u in seen] == [[fake_hash(100)], [fake_hash(101)], [fake_hash(102)]]
        assert await slow.next() is None  # two were waiting when the third came: the stream ended
        assert slow.dropped and slow._queue.qsize() == 1  # only the end marker is kept
        assert await slow.next() is None
        hub.publish()
        assert hub.num_subscribers == 1 and not fast.dropped

    run(go())


def test_the_last_reader_leaving_detaches_the_pool_and_forgets_what_was_logged():
    async def go():
        pool = BlockPool(num_blocks=4, block_size=1)
        hub = KvEventHub(pool)
        sub = hub.subscribe(asyncio.get_running_loop())
        sub.close()
        pool.cache_block(pool.allocate(1)[0], fake_hash(5))
        hub.publish()
        assert pool.listener is None and hub.num_subscribers == 0
        assert hub._log.take() == ([], [])
        again = hub.subscribe(asyncio.get_running_loop())
        assert again.snapshot.hashes == [fake_hash(5)]

    run(go())


def test_close_ends_every_stream_and_later_subscriptions_end_after_their_snapshot():
    async def go():
        pool = BlockPool(num_blocks=4, block_size=1)
        hub = KvEventHub(pool)
        sub = hub.subscribe(asyncio.get_running_loop())
        hub.close()
        assert [u async for u in sub] == []
        late = hub.subscribe(asyncio.get_running_loop())
        assert late.snapshot.hashes == [] and await late.next() is None
        hub.publish()
        assert pool.listener is None

    run(go())


def test_a_reader_whose_loop_has_closed_is_forgotten():
    pool = BlockPool(num_blocks=4, block_size=1)
    hub = KvEventHub(pool)
    loop = asyncio.new_event_loop()
    hub.subscribe(loop)
    loop.close()
    pool.allocate(1)
    hub.publish()  # the hand-off fails: the reader is marked closed...
    hub.publish()  # ...and forgotten
    assert hub.num_subscribers == 0 and pool.listener is None


# -- a real engine --------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


def engine_config():
    return EngineConfig(ctx_size=64, parallel=2, block_size=BLOCK_SIZE)


PROMPTS = [list(range(10, 23)), list(range(30, 39))]  # 13 and 9 tokens: 3 and 2 full blocks
ONE_TOKEN = SamplingParams(max_tokens=1, temperature=0.0)


def test_an_engine_step_publishes_one_batch_for_all_its_requests(loaded):
    async def go():
        engine = Engine(loaded, engine_config())
        sub = engine.kv_events.subscribe(asyncio.get_running_loop())
        assert sub.snapshot == KvSnapshot(block_size=BLOCK_SIZE, hashes=[], active_blocks=0)
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(EngineRequest(f"r{i}", prompt, ONE_TOKEN))
        outputs = engine.step()  # both prefills in one step; one token each, so both finish
        engine.kv_events.publish()
        assert [o.finished for o in outputs] == [True, True]
        expected = [h for p in PROMPTS for h in prefix_block_hashes(p, BLOCK_SIZE)]
        assert await sub.next() == KvUpdate(stored=expected, removed=[], active_blocks=0)

    run(go())


def test_a_router_hashing_the_prompt_with_its_salt_finds_exactly_the_blocks_the_engine_reports(loaded):
    async def go():
        engine = Engine(loaded, engine_config())
        sub = engine.kv_events.subscribe(asyncio.get_running_loop())
        engine.add_request(EngineRequest("r", PROMPTS[0], ONE_TOKEN, cache_salt="tenant-a"))
        engine.step()
        engine.kv_events.publish()
        update = await sub.next()
        # As the wire carries them: JSON strings, read back by the router's index.
        wire = json.loads(json.dumps({"type": "update", "stored": update.stored, "removed": update.removed,
                                      "active_blocks": update.active_blocks}))
        index = KvIndex()
        index.apply("w", {"type": "snapshot", "block_size": BLOCK_SIZE, "hashes": sub.snapshot.hashes})
        index.apply("w", wire)
        salted = prefix_block_hashes(PROMPTS[0], BLOCK_SIZE, parent=root_hash("tenant-a"))
        assert update.stored == salted and index.overlap("w", salted) == 3
        assert index.overlap("w", prefix_block_hashes(PROMPTS[0], BLOCK_SIZE)) == 0

    run(go())


def test_the_async_engine_publishes_before_the_answer_and_a_reset_as_removals(loaded):
    async def go():
        engine = AsyncEngine(Engine(loaded, engine_config()))
        try:
            sub = await engine.subscribe_kv_events()
            async for out in engine.generate(EngineRequest("a", PROMPTS[0], ONE_TOKEN)):
                pass
            hashes = prefix_block_hashes(PROMPTS[0], BLOCK_SIZE)
            # Already queued when the answer came: no waiting on the engine here.
            assert sub._queue.qsize() == 1
            assert await sub.next() == KvUpdate(stored=hashes, removed=[], active_blocks=0)
            assert await engine.call(Engine.reset_prefix_cache) == 3
            assert await sub.next() == KvUpdate(stored=[], removed=hashes[::-1], active_blocks=0)
            again = await engine.subscribe_kv_events()
            assert again.snapshot.hashes == []
        finally:
            engine.shutdown()
        assert await sub.next() is None  # shutdown ends every stream

    run(go())


def test_subscribing_to_a_stopped_engine_is_refused(loaded):
    async def go():
        engine = AsyncEngine(Engine(loaded, engine_config()))
        engine.shutdown()
        with pytest.raises(EngineDeadError):
            await engine.subscribe_kv_events()

    run(go())
