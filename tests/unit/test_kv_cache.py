"""Block pool: allocation, reference counts, hash chaining, exact LRU eviction."""

import pytest

from inferd.engine.kv_cache import BlockPool, NoFreeBlocksError
from inferd.prefix_hash import prefix_block_hashes


def block_hash(tokens):
    """The hash of a first block holding `tokens`."""
    (h,) = prefix_block_hashes(tokens, len(tokens))
    return h


def test_allocate_takes_lowest_free_ids_in_order_and_free_returns_them():
    pool = BlockPool(num_blocks=4, block_size=2)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.num_free == 1 and pool.num_used == 3
    pool.free_blocks([2, 1, 0])
    assert pool.num_free == 4
    assert list(pool.free) == [3, 2, 1, 0]  # freed blocks queue behind the never-used one
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(5)


def test_hash_chain_depends_on_every_earlier_block():
    a = prefix_block_hashes([1, 2, 3, 4, 5], block_size=2)
    assert len(a) == 2  # the partial block [5] has no hash
    assert a[0] == block_hash([1, 2])
    assert a[1] == prefix_block_hashes([3, 4], 2, parent=a[0])[0]
    b = prefix_block_hashes([9, 2, 3, 4], block_size=2)
    assert b[1] != a[1]  # same tokens, different parent
    assert prefix_block_hashes([3, 4], 2, start=0, parent=a[0]) == [a[1]]
    assert prefix_block_hashes([1, 2, 3, 4], 2, start=1, parent=a[0]) == [a[1]]


def test_match_prefix_shares_blocks_and_counts_references():
    pool = BlockPool(num_blocks=4, block_size=2)
    hashes = prefix_block_hashes([1, 2, 3, 4], 2)
    blocks = pool.allocate(2)
    for b, h in zip(blocks, hashes):
        pool.cache_block(b, h)
    assert pool.match_prefix(hashes) == blocks
    assert [pool.ref_counts[b] for b in blocks] == [2, 2]
    pool.free_blocks(blocks[::-1])  # first owner leaves: still referenced
    assert pool.num_free == 2
    pool.free_blocks(blocks[::-1])
    assert pool.num_free == 4 and pool.cached  # free but still cached
    assert pool.match_prefix(hashes) == blocks  # revived from the free list
    assert pool.num_free == 2
    assert (pool.stats.queries, pool.stats.hits) == (4, 4)


def test_match_stops_at_first_miss():
    pool = BlockPool(num_blocks=4, block_size=2)
    hashes = prefix_block_hashes([1, 2, 3, 4, 5, 6], 2)
    b = pool.allocate(3)
    pool.cache_block(b[0], hashes[0])
    pool.cache_block(b[2], hashes[2])  # not reachable without block 1
    assert pool.match_prefix(hashes) == [b[0]]
    assert pool.stats.hits == 1 and pool.stats.queries == 3


def test_lru_eviction_order_is_free_order():
    pool = BlockPool(num_blocks=3, block_size=1)
    blocks = pool.allocate(3)
    for tok, b in zip([10, 11, 12], blocks):
        pool.cache_block(b, block_hash([tok]))
    pool.free_blocks([blocks[2], blocks[0], blocks[1]])
    # Allocation evicts in that order: 2 first, then 0.
    assert pool.allocate(1) == [blocks[2]]
    assert block_hash([12]) not in pool.cached
    assert pool.allocate(1) == [blocks[0]]
    assert block_hash([10]) not in pool.cached
    assert block_hash([11]) in pool.cached
    assert pool.stats.evictions == 2


def test_a_hit_refreshes_lru_position():
    pool = BlockPool(num_blocks=2, block_size=1)
    a, b = pool.allocate(2)
    ha, hb = block_hash([1]), block_hash([2])
    pool.cache_block(a, ha)
    pool.cache_block(b, hb)
    pool.free_blocks([a, b])  # a is least recent
    assert pool.match_prefix([ha]) == [a]
    pool.free_blocks([a])  # a is now most recent
    assert pool.allocate(1) == [b]


def test_duplicate_hash_keeps_first_block():
    pool = BlockPool(num_blocks=2, block_size=1)
    a, b = pool.allocate(2)
    h = block_hash([7])
    pool.cache_block(a, h)
    pool.cache_block(b, h)
    assert pool.cached[h] == a and pool.hash_of[b] is None


def test_double_free_is_detected():
    pool = BlockPool(num_blocks=1, block_size=1)
    (a,) = pool.allocate(1)
    pool.free_blocks([a])
    with pytest.raises(RuntimeError):
        pool.free_blocks([a])


def test_reset_drops_only_free_cached_blocks():
    pool = BlockPool(num_blocks=2, block_size=1)
    a, b = pool.allocate(2)
    pool.cache_block(a, block_hash([1]))
    pool.cache_block(b, block_hash([2]))
    pool.free_blocks([a])
    assert pool.reset_prefix_cache() == 1
    assert pool.cached == {block_hash([2]): b}
