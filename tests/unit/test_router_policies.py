"""Routing policies: round-robin, least-load, direct, kv-aware, precise; the registry."""

from __future__ import annotations

import pytest

from inferd.prefix_hash import prefix_block_hashes
from inferd.router.kv_index import KvIndex
from inferd.router.policies import POLICIES, make_policy
from inferd.router.policies.base import NoWorkerError, RoutingRequest
from inferd.router.policies.direct import DirectPolicy, UnknownWorkerError, WorkerUnavailableError
from inferd.router.policies.kv_aware import KvAwarePolicy
from inferd.router.policies.least_load import LeastLoadPolicy
from inferd.router.policies.precise import PrecisePolicy
from inferd.router.policies.round_robin import RoundRobinPolicy
from inferd.router.worker import Worker


def W(worker_id: str, in_flight: int = 0) -> Worker:
    return Worker(id=worker_id, url=f"http://{worker_id}:8080", in_flight=in_flight)


def R(text: str = "", headers: dict | None = None, token_ids: list[int] | None = None) -> RoutingRequest:
    return RoutingRequest(path="/v1/chat/completions", body={}, text=text, headers=headers or {}, token_ids=token_ids)


def picks(policy, candidates, n, request=None):
    return [(d.worker.id, d.reason) for d in (policy.choose(request or R(), candidates) for _ in range(n))]


# -- round-robin ---------------------------------------------------------------


def test_round_robin_cycles_in_id_order():
    fleet = [W("b"), W("c"), W("a")]
    assert [w for w, _ in picks(RoundRobinPolicy(), fleet, 4)] == ["a", "b", "c", "a"]
    assert {reason for _, reason in picks(RoundRobinPolicy(), fleet, 2)} == {"round-robin"}


def test_round_robin_follows_the_last_id_when_candidates_change():
    policy = RoundRobinPolicy()
    a, b, c = W("a"), W("b"), W("c")
    assert policy.choose(R(), [a, b, c]).worker is a
    assert policy.choose(R(), [a, b, c]).worker is b
    assert policy.choose(R(), [a, c]).worker is c  # b retried away: the next after b
    assert policy.choose(R(), [a, b]).worker is a  # nothing after c: wrap


# -- least-load ----------------------------------------------------------------


def test_least_load_picks_fewest_in_flight():
    assert picks(LeastLoadPolicy(), [W("a", 3), W("b", 1), W("c", 2)], 2) == [("b", "least-load")] * 2


def test_least_load_rotates_ties():
    assert [w for w, _ in picks(LeastLoadPolicy(), [W("c"), W("a"), W("b")], 4)] == ["a", "b", "c", "a"]
    assert [w for w, _ in picks(LeastLoadPolicy(), [W("a"), W("b", 5), W("c")], 3)] == ["a", "c", "a"]


# -- direct ----------------------------------------------------------------------


def test_direct_takes_the_named_worker():
    fleet = [W("a"), W("b", 9)]
    decision = DirectPolicy().choose(R(headers={"x-worker-id": "b"}), fleet)
    assert (decision.worker.id, decision.reason, decision.matched) == ("b", "direct", 0.0)


@pytest.mark.parametrize("headers", [{}, {"x-worker-id": ""}, {"x-worker-id": "  "}])
def test_direct_without_a_name_falls_back_to_least_load(headers):
    decision = DirectPolicy().choose(R(headers=headers), [W("a", 2), W("b", 1)])
    assert (decision.worker.id, decision.reason) == ("b", "least-load")


def test_direct_unknown_worker_is_a_client_error():
    fleet = {"a": W("a"), "b": W("b")}
    policy = DirectPolicy(lookup=fleet.get)
    with pytest.raises(UnknownWorkerError) as caught:
        policy.choose(R(headers={"x-worker-id": "zz"}), list(fleet.values()))
    assert caught.value.status == 400
    assert caught.value.worker_id == "zz"
    assert not isinstance(caught.value, NoWorkerError)
    assert "no worker 'zz' in the fleet" in str(caught.value)


def test_direct_known_but_not_a_candidate_is_unavailable():
    fleet = {"a": W("a"), "b": W("b")}
    policy = DirectPolicy(lookup=fleet.get)
    with pytest.raises(WorkerUnavailableError) as caught:
        policy.choose(R(headers={"x-worker-id": "b"}), [fleet["a"]])
    assert caught.value.status == 503
    assert isinstance(caught.value, NoWorkerError)
    # without a lookup every miss reads as unavailable
    with pytest.raises(WorkerUnavailableError):
        DirectPolicy().choose(R(headers={"x-worker-id": "zz"}), [fleet["a"]])


def test_direct_hooks_feed_the_fallback():
    policy = DirectPolicy(KvAwarePolicy())
    a, b = W("a"), W("b")
    request = R("hello world", headers={"x-worker-id": "b"})
    policy.on_routed(request, policy.choose(request, [a, b]).worker)
    assert policy.cache_view("b")["chars"] == 11
    decision = policy.choose(R("hello world"), [a, b])
    assert (decision.worker.id, decision.reason) == ("b", "cache-match")
    policy.on_worker_removed("b")
    assert policy.cache_view("b")["chars"] == 0


# -- kv-aware ----------------------------------------------------------------------


def test_kv_aware_defaults():
    policy = KvAwarePolicy()
    assert (policy.cache_threshold, policy.balance_abs, policy.balance_rel) == (0.5, 8, 1.5)
    assert policy.tree.max_chars == 2_000_000


def test_kv_aware_empty_tree_goes_by_load():
    decision = KvAwarePolicy().choose(R("hello"), [W("a", 1), W("b")])
    assert (decision.worker.id, decision.reason, decision.matched) == ("b", "least-load", 0.0)


def test_kv_aware_follows_the_prefix():
    policy = KvAwarePolicy()
    a, b = W("a"), W("b", 3)
    policy.on_routed(R("<user>hi\n"), b)
    decision = policy.choose(R("<user>hi\n<assistant>yo\n"), [a, b])  # 9 of 23 chars: not over half
    assert (decision.worker.id, decision.reason, decision.matched) == ("a", "least-load", 0.0)
    policy.on_routed(R("<user>hi\n<assistant>yo\n"), b)
    decision = policy.choose(R("<user>hi\n<assistant>yo\n<user>ok\n"), [a, b])  # 23 of 32
    assert (decision.worker.id, decision.reason, decision.matched) == ("b", "cache-match", 23 / 32)


def test_kv_aware_longest_match_then_load_then_id():
    policy = KvAwarePolicy()
    a, b, c = W("a", 2), W("b", 1), W("c", 1)
    policy.on_routed(R("abcdef"), a)
    policy.on_routed(R("abcdefgh"), b)
    assert policy.choose(R("abcdefgh!"), [a, b, c]).worker is b
    policy.on_routed(R("abcdefgh"), a)
    policy.on_routed(R("abcdefgh"), c)
    assert policy.choose(R("abcdefgh!"), [a, b, c]).worker is b  # b and c tie on load: id
    assert policy.choose(R("abcdefgh!"), [a, c]).worker is c


def test_kv_aware_ignores_holders_that_are_not_candidates():
    policy = KvAwarePolicy()
    policy.on_routed(R("hello"), W("gone"))
    decision = policy.choose(R("hello"), [W("a"), W("b")])
    assert (decision.worker.id, decision.reason) == ("a", "least-load")


@pytest.mark.parametrize(
    "load_a, load_b, reason, chosen",
    [
        (9, 1, "cache-match", "a"),  # gap 8: not over balance_abs
        (10, 1, "balance", "b"),  # gap 9, and 10 > 1.5
        (40, 30, "cache-match", "a"),  # gap 10, but 40 <= 45
        (46, 30, "balance", "b"),  # gap 16 and 46 > 45
        (9, 0, "balance", "b"),
    ],
)
def test_kv_aware_balance_guard(load_a, load_b, reason, chosen):
    policy = KvAwarePolicy()
    a, b = W("a", load_a), W("b", load_b)
    policy.on_routed(R("hello"), a)
    decision = policy.choose(R("hello"), [a, b])
    assert (decision.worker.id, decision.reason) == (chosen, reason)
    assert decision.matched == (1.0 if chosen == "a" else 0.0)


def test_kv_aware_threshold_is_strict():
    policy = KvAwarePolicy(cache_threshold=0.5)
    a, b = W("a"), W("b")
    policy.on_routed(R("abcd"), b)
    assert policy.choose(R("abcdwxyz"), [a, b]).reason == "least-load"  # exactly half
    assert policy.choose(R("abcdwxy"), [a, b]).reason == "cache-match"


def test_kv_aware_records_every_routed_request():
    policy = KvAwarePolicy(balance_abs=0)
    a, b = W("a", 5), W("b")
    request = R("hello")
    decision = policy.choose(request, [a, b])
    assert decision.reason == "balance"
    policy.on_routed(request, decision.worker)
    assert policy.cache_view("b") == {
        "policy": "kv-aware",
        "chars": 5,
        "nodes": 1,
        "max_chars": 2_000_000,
        "prompts": 1,
        "recent": [{"prefix": "hello", "chars": 5, "last_access": 1}],
    }
    policy.on_worker_removed("b")
    assert policy.choose(R("hello"), [W("a"), W("b")]).reason == "least-load"


@pytest.mark.parametrize(
    "options, flag",
    [({"cache_threshold": 1.5}, "--cache-threshold"), ({"balance_abs": -1}, "--balance-abs"),
     ({"balance_rel": 0.5}, "--balance-rel"), ({"max_tree_chars": 0}, "max_chars")],
)
def test_kv_aware_rejects_bad_options(options, flag):
    with pytest.raises(ValueError, match=flag):
        KvAwarePolicy(**options)


# -- precise ---------------------------------------------------------------------

TOKENS = list(range(12))  # 3 blocks of 4


def snapshot(hashes, active=0, block_size=4):
    return {"type": "snapshot", "block_size": block_size, "hashes": list(hashes), "active_blocks": active}


def precise_fleet(a_hashes, a_active=0, b_hashes=(), b_active=0, **options):
    index = KvIndex()
    index.apply("a", snapshot(a_hashes, a_active))
    index.apply("b", snapshot(b_hashes, b_active))
    return PrecisePolicy(index=index, **options), index


CHAIN = prefix_block_hashes(TOKENS, 4)


def test_precise_lowest_cost_wins():
    policy, _ = precise_fleet(CHAIN[:2])  # a: cost 1, b: cost 3
    decision = policy.choose(R(token_ids=TOKENS), [W("a"), W("b")])
    assert (decision.worker.id, decision.reason, decision.matched) == ("a", "kv-cost", 2 / 3)


def test_precise_overlap_is_a_chain():
    policy, _ = precise_fleet(CHAIN[1:])  # holds blocks 2 and 3 but not 1: nothing usable
    decision = policy.choose(R(token_ids=TOKENS), [W("a"), W("b", 1)])
    assert (decision.worker.id, decision.matched) == ("a", 0.0)  # tie at 3: fewer in flight


def test_precise_load_outweighs_overlap():
    policy, _ = precise_fleet(CHAIN[:2], a_active=5)  # a: 1 + 5, b: 3 + 0
    assert policy.choose(R(token_ids=TOKENS), [W("a"), W("b")]).worker.id == "b"
    policy, _ = precise_fleet(CHAIN[:2], a_active=5, kv_overlap_weight=3.0)  # a: 3 + 5, b: 9 + 0
    assert policy.choose(R(token_ids=TOKENS), [W("a"), W("b")]).worker.id == "a"


def test_precise_ties_go_to_fewer_in_flight_then_id():
    policy, _ = precise_fleet(CHAIN, a_active=2, b_hashes=CHAIN[:1], b_active=0)  # both cost 2
    assert policy.choose(R(token_ids=TOKENS), [W("a", 1), W("b", 2)]).worker.id == "a"
    assert policy.choose(R(token_ids=TOKENS), [W("b", 1), W("a", 1)]).worker.id == "a"


def test_precise_hashes_with_each_workers_block_size():
    index = KvIndex()
    index.apply("a", snapshot(prefix_block_hashes(TOKENS, 4)[:1], block_size=4))  # 1 of 3 blocks
    index.apply("b", snapshot(prefix_block_hashes(TOKENS, 2)[:5], block_size=2))  # 5 of 6 blocks
    decision = PrecisePolicy(index=index).choose(R(token_ids=TOKENS), [W("a"), W("b")])
    assert (decision.worker.id, decision.matched) == ("b", 5 / 6)  # cost 1 against 2


def test_precise_prompt_shorter_than_a_block():
    policy, _ = precise_fleet([], a_active=3, b_active=1)
    decision = policy.choose(R(token_ids=[1, 2]), [W("a"), W("b")])
    assert (decision.worker.id, decision.reason, decision.matched) == ("b", "kv-cost", 0.0)


def test_precise_falls_back_without_tokens_or_a_full_view():
    policy, _ = precise_fleet(CHAIN)
    a, b, c = W("a"), W("b", 1), W("c")
    policy.on_routed(R("hello"), b)
    decision = policy.choose(R("hello"), [a, b])  # no token ids: text matching
    assert (decision.worker.id, decision.reason) == ("b", "cache-match")
    decision = policy.choose(R("x", token_ids=TOKENS), [a, c])  # c has no KV view
    assert (decision.worker.id, decision.reason) == ("a", "least-load")


def test_precise_counts_routed_blocks_until_the_worker_reports():
    policy, index = precise_fleet([])
    a, b = W("a"), W("b")
    request = R("text", token_ids=list(range(13)))  # 4 blocks, the last partial
    decision = policy.choose(request, [a, b])
    assert decision.worker is a
    policy.on_routed(request, a)
    assert index.get("a").active_blocks == 4
    assert policy.choose(request, [a, b]).worker is b  # a burst spreads
    assert policy.fallback.tree.chars("a") == 4  # the text fallback learns too
    index.apply("a", {"type": "ping", "active_blocks": 1})
    assert index.get("a").active_blocks == 1


def test_precise_forgets_removed_workers_and_shows_its_view():
    policy, index = precise_fleet(CHAIN, a_active=2)
    view = policy.cache_view("a")
    assert {k: view[k] for k in ("policy", "synced", "block_size", "blocks", "active_blocks")} == {
        "policy": "precise", "synced": True, "block_size": 4, "blocks": 3, "active_blocks": 2}
    assert view["fallback"]["policy"] == "kv-aware"
    policy.on_worker_removed("a")
    assert "a" not in index
    assert policy.cache_view("a")["synced"] is False


def test_precise_rejects_negative_weight():
    with pytest.raises(ValueError, match="--kv-overlap-weight"):
        PrecisePolicy(kv_overlap_weight=-1)


# -- registry ----------------------------------------------------------------------


def test_registry_names():
    assert POLICIES == ("kv-aware", "precise", "round-robin", "least-load", "direct")
    for name in POLICIES:
        assert make_policy(name).name == name


def test_registry_unknown_name():
    with pytest.raises(ValueError, match="choose one of kv-aware, precise, round-robin, least-load, direct"):
        make_policy("random")


def test_registry_passes_options_and_drops_none():
    policy = make_policy("kv-aware", cache_threshold=0.7, balance_abs=None, max_tree_chars=100)
    assert (policy.cache_threshold, policy.balance_abs, policy.tree.max_chars) == (0.7, 8, 100)
    index = KvIndex()
    precise = make_policy("precise", index=index, kv_overlap_weight=2.0, balance_rel=2.0)
    assert (precise.index, precise.kv_overlap_weight, precise.fallback.balance_rel) == (index, 2.0, 2.0)
    direct = make_policy("direct", fallback="kv-aware", cache_threshold=0.9)
    assert (direct.fallback.name, direct.fallback.cache_threshold) == ("kv-aware", 0.9)
    assert make_policy("direct").fallback.name == "least-load"
    assert make_policy("round-robin", cache_threshold=None).name == "round-robin"


@pytest.mark.parametrize(
    "name, options",
    [("round-robin", {"cache_threshold": 0.5}), ("kv-aware", {"kv_overlap_weight": 1.0}),
     ("precise", {"lookup": dict.get}), ("direct", {"fallback": LeastLoadPolicy(), "balance_abs": 1})],
)
def test_registry_rejects_options_a_policy_does_not_take(name, options):
    with pytest.raises(TypeError, match="takes no option"):
        make_policy(name, **options)


def test_registry_direct_cannot_fall_back_to_itself():
    with pytest.raises(ValueError, match="another policy"):
        make_policy("direct", fallback="direct")
