"""PrefixTree: exact matches, splits, per-worker LRU eviction, removal; properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.router.prefix_tree import DEFAULT_MAX_CHARS, PrefixMatch, PrefixTree, common_prefix_len


@pytest.mark.parametrize(
    "a, b, n",
    [("", "", 0), ("abc", "", 0), ("abc", "abd", 2), ("abc", "abcdef", 3), ("xyz", "abc", 0), ("héllo", "hélp", 3)],
)
def test_common_prefix_len(a, b, n):
    assert common_prefix_len(a, b) == n
    assert common_prefix_len(b, a) == n


def test_long_common_prefix():
    a = "x" * 10_000 + "a"
    assert common_prefix_len(a, "x" * 10_000 + "b") == 10_000
    assert common_prefix_len(a, "x" * 7_777 + "y") == 7_777


def test_default_bound():
    assert PrefixTree().max_chars == DEFAULT_MAX_CHARS == 2_000_000


def test_empty_tree_and_empty_text():
    tree = PrefixTree()
    assert tree.match("hello") == PrefixMatch(0, {})
    tree.insert("", "a")
    assert tree.match("") == PrefixMatch(0, {})
    assert tree.chars("a") == 0
    assert tree.workers() == []


def test_match_is_partial_inside_an_edge():
    tree = PrefixTree()
    tree.insert("hello world", "a")
    assert tree.match("hello world") == PrefixMatch(11, {"a": 11})
    assert tree.match("hello there") == PrefixMatch(6, {"a": 6})
    assert tree.match("hello world, again") == PrefixMatch(11, {"a": 11})
    assert tree.match("goodbye") == PrefixMatch(0, {})


def test_split_shares_the_common_part():
    tree = PrefixTree()
    tree.insert("hello world", "a")
    tree.insert("hello there", "b")
    assert tree.match("hello world") == PrefixMatch(11, {"a": 11, "b": 6})
    assert tree.match("hello there") == PrefixMatch(11, {"a": 6, "b": 11})
    assert tree.match("hello") == PrefixMatch(5, {"a": 5, "b": 5})
    assert (tree.chars("a"), tree.chars("b")) == (11, 11)  # the shared edge counts for each
    assert tree.workers() == ["a", "b"]


def test_insert_of_a_prefix_ends_inside_an_edge():
    tree = PrefixTree()
    tree.insert("abcdef", "a")
    tree.insert("abc", "b")
    assert tree.match("abcdef") == PrefixMatch(6, {"a": 6, "b": 3})
    assert tree.chars("b") == 3


def test_reinsert_counts_once():
    tree = PrefixTree()
    tree.insert("abc", "a")
    tree.insert("abc", "a")
    tree.insert("abcdef", "a")
    assert tree.chars("a") == 6
    assert tree.view("a")["nodes"] == 2


def test_text_longer_than_the_bound_keeps_its_head():
    tree = PrefixTree(max_chars=5)
    tree.insert("abcdefgh", "a")
    assert tree.chars("a") == 5
    assert tree.match("abcdefgh") == PrefixMatch(5, {"a": 5})


def test_evicts_least_recently_used_first():
    tree = PrefixTree(max_chars=10)
    tree.insert("aaaaa", "w")
    tree.insert("bbbbb", "w")
    tree.insert("aaaaa", "w")  # touched again: now "bbbbb" is the oldest
    tree.insert("ccccc", "w")
    assert tree.chars("w") == 10
    assert tree.match("bbbbb") == PrefixMatch(0, {})
    assert tree.match("aaaaa").workers == {"w": 5}
    assert tree.match("ccccc").workers == {"w": 5}


def test_match_does_not_refresh():
    tree = PrefixTree(max_chars=10)
    tree.insert("aaaaa", "w")
    tree.insert("bbbbb", "w")
    tree.match("aaaaa")
    tree.insert("ccccc", "w")
    assert tree.match("aaaaa") == PrefixMatch(0, {})
    assert tree.match("bbbbb").workers == {"w": 5}


def test_eviction_drops_leaves_then_their_parents():
    tree = PrefixTree(max_chars=6)
    tree.insert("abcd", "w")  # tick 1
    tree.insert("abef", "w")  # tick 2: "ab" + "cd" + "ef"
    tree.insert("gh", "w")  # tick 3: 8 chars, "cd" (tick 1) goes
    assert tree.chars("w") == 6
    assert tree.match("abcd").workers == {"w": 2}
    tree.insert("ijkl", "w")  # tick 4: 10 chars; "ef" then "ab" (both tick 2) go
    assert tree.chars("w") == 6
    assert tree.match("abef") == PrefixMatch(0, {})
    assert tree.match("gh").workers == {"w": 2}
    assert tree.match("ijkl").workers == {"w": 4}


def test_eviction_is_per_worker():
    tree = PrefixTree(max_chars=8)
    tree.insert("shared", "a")
    tree.insert("shared", "b")
    tree.insert("other", "a")  # a: 11 chars, "shared" goes for a only
    assert tree.chars("a") == 5
    assert tree.chars("b") == 6
    assert tree.match("shared") == PrefixMatch(6, {"b": 6})


def test_remove_worker():
    tree = PrefixTree()
    tree.insert("hello world", "a")
    tree.insert("hello there", "b")
    tree.insert("bye", "a")
    tree.remove_worker("a")
    assert tree.match("hello world") == PrefixMatch(6, {"b": 6})
    assert tree.match("bye") == PrefixMatch(0, {})
    assert tree.chars("a") == 0
    assert tree.workers() == ["b"]
    tree.remove_worker("nobody")
    tree.insert("bye", "a")  # a worker may come back
    assert tree.match("bye").workers == {"a": 3}


def test_view_lists_most_recent_prompts():
    tree = PrefixTree()
    tree.insert("hello world", "a")
    tree.insert("hello there", "a")
    tree.insert("x" * 100, "a")
    tree.insert("hello world", "b")
    view = tree.view("a", limit=2, preview=8)
    assert view == {
        "chars": 11 + 5 + 100,
        "nodes": 4,
        "max_chars": DEFAULT_MAX_CHARS,
        "prompts": 3,
        "recent": [
            {"prefix": "xxxxxxxx", "chars": 100, "last_access": 3},
            {"prefix": "hello th", "chars": 11, "last_access": 2},
        ],
    }
    assert tree.view("nobody") == {"chars": 0, "nodes": 0, "max_chars": DEFAULT_MAX_CHARS, "prompts": 0, "recent": []}


def test_rejects_a_bound_below_one():
    with pytest.raises(ValueError, match="max_chars"):
        PrefixTree(max_chars=0)


# -- properties --------------------------------------------------------------

texts = st.text(alphabet="abc", max_size=12)
workers = st.sampled_from(["w1", "w2", "w3"])
ops = st.lists(st.tuples(st.sampled_from(["insert", "insert", "insert", "remove"]), texts, workers), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=ops, bound=st.integers(1, 30), probes=st.lists(texts, max_size=5))
def test_bounded_tree_properties(ops, bound, probes):
    tree = PrefixTree(max_chars=bound)
    for op, text, worker in ops:
        if op == "remove":
            tree.remove_worker(worker)
            assert worker not in tree.match(text).workers
            continue
        tree.insert(text, worker)
        # the newest text is never what its own insert evicts
        assert tree.match(text).workers.get(worker, 0) == min(len(text), bound)
        for w in ("w1", "w2", "w3"):
            assert tree.chars(w) <= bound
    for probe in probes:
        found = tree.match(probe)
        assert found.matched <= len(probe)
        assert found.matched == max(found.workers.values(), default=0)
        assert all(0 < n <= len(probe) for n in found.workers.values())


@settings(max_examples=300, deadline=None)
@given(inserts=st.lists(st.tuples(texts, workers), max_size=30), probes=st.lists(texts, min_size=1, max_size=5))
def test_unbounded_tree_matches_a_plain_model(inserts, probes):
    """Without eviction a worker's match is its longest common prefix with any text it was sent."""
    tree = PrefixTree()
    sent: dict[str, list[str]] = {}
    for text, worker in inserts:
        tree.insert(text, worker)
        sent.setdefault(worker, []).append(text)
    for probe in probes:
        expect = {w: max(common_prefix_len(probe, t) for t in ts) for w, ts in sent.items()}
        assert tree.match(probe).workers == {w: n for w, n in expect.items() if n > 0}
    for worker, ts in sent.items():
        # chars: the distinct prefixes it holds, i.e. the size of a trie of its texts
        assert tree.chars(worker) == len({t[:i] for t in ts for i in range(1, len(t) + 1)})
