"""The fleet view: membership, what each worker serves, who may take a request."""

from __future__ import annotations

from inferd.discovery.record import WorkerRecord
from inferd.router.breaker import CircuitBreaker
from inferd.router.fleet import Fleet
from router_fakes import RecordingPolicy


def fleet_of(*records: WorkerRecord, attach=None) -> tuple[Fleet, RecordingPolicy]:
    policy = RecordingPolicy()
    fleet = Fleet(policy, attach=attach)
    for r in records:
        fleet.upsert(r, "etcd")
    return fleet, policy


def record(worker_id: str, model: str | None = None, url: str | None = None, **fields) -> WorkerRecord:
    return WorkerRecord(id=worker_id, url=url or f"http://{worker_id}:8080", model=model, **fields)


def ids(workers) -> list[str]:
    return [w.id for w in workers]


def test_upsert_adds_then_updates_in_place_keeping_load_and_breaker():
    fleet, policy = fleet_of(record("a", "m"))
    a = fleet.get("a")
    a.in_flight = 2
    a.breaker.record_failure()
    again = fleet.upsert(record("a", "m", parallel=8, capabilities=["kv-events"]), "etcd")
    assert again is a
    assert (a.parallel, a.capabilities, a.in_flight, a.breaker.failures) == (8, frozenset({"kv-events"}), 2, 1)
    assert policy.removed == []


def test_a_new_url_is_a_new_process():
    stopped = []
    fleet, policy = fleet_of(record("a", "m"), attach=lambda w: lambda: stopped.append(w.url))
    old = fleet.get("a")
    new = fleet.upsert(record("a", "m", url="http://a:9090"), "etcd")
    assert new is not old and new.url == "http://a:9090"
    assert policy.removed == ["a"]  # what the policy believed the old process held is gone
    assert stopped == ["http://a:8080"]


def test_remove_tells_the_policy_and_stops_what_was_attached():
    stopped = []
    fleet, policy = fleet_of(record("a"), record("b"), attach=lambda w: lambda: stopped.append(w.id))
    fleet.model_cards["a"] = [{"id": "m"}]
    assert fleet.remove("a").id == "a"
    assert (ids(fleet.workers.values()), policy.removed, stopped, fleet.model_cards) == (["b"], ["a"], ["a"], {})
    assert fleet.remove("a") is None
    assert policy.removed == ["a"]


def test_attach_may_decline():
    attached, stopped = [], []

    def attach(worker):  # follows b only; declines a
        attached.append(worker.id)
        return (lambda: stopped.append(worker.id)) if worker.id == "b" else None

    fleet, policy = fleet_of(record("a"), record("b"), attach=attach)
    assert fleet.remove("a").id == "a"
    assert (attached, ids(fleet.workers.values()), policy.removed, stopped) == (["a", "b"], ["b"], ["a"], [])
    fleet.remove("b")
    assert (policy.removed, stopped) == (["a", "b"], ["b"])


def test_retain_removes_only_missing_workers_of_that_source():
    fleet, policy = fleet_of(record("a"), record("b"))
    fleet.upsert(record("s", url="http://s:1"), "static")
    fleet.retain("etcd", ["b"])
    assert ids(fleet.workers.values()) == ["b", "s"]
    assert policy.removed == ["a"]


def test_candidates_serve_the_model_and_unknown_models_take_any():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"), record("c"))
    fleet.model_cards["a"] = [{"id": "m1"}, {"id": "alias-1"}]
    assert ids(fleet.candidates("m1")) == ["a", "c"]
    assert ids(fleet.candidates("alias-1")) == ["a", "c"]
    assert ids(fleet.candidates("m2:latest")) == ["b", "c"]  # Ollama's default tag
    assert ids(fleet.candidates(None)) == ["a", "b", "c"]
    assert ids(fleet.candidates("m1", exclude=["a"])) == ["c"]


def test_a_name_no_worker_serves_goes_to_every_routable_worker():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"))
    assert ids(fleet.candidates("nobody")) == ["a", "b"]


def test_a_served_name_whose_workers_are_down_has_no_candidates():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"))
    fleet.get("a").ready = False
    assert fleet.candidates("m1") == []
    assert ids(fleet.routable()) == ["b"]


def test_unroutable_workers_are_never_candidates():
    fleet = Fleet(RecordingPolicy(), breaker=lambda: CircuitBreaker(failure_threshold=1, clock=lambda: 0.0))
    for r in (record("a"), record("b"), record("c")):
        fleet.upsert(r, "static")
    fleet.get("a").ready = False
    fleet.get("b").breaker.record_failure()
    assert ids(fleet.candidates(None)) == ["c"]
    assert [w.state for w in fleet.workers.values()] == ["not-ready", "unhealthy", "ready"]


def test_served_models_is_the_union_in_fleet_order():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"), record("c"))
    fleet.model_cards["b"] = [{"id": "m2"}, {"id": "gpt-4o-mini"}]
    assert fleet.served_models() == ["m1", "gpt-4o-mini", "m2"]


def test_a_worker_with_the_model_loaded_is_preferred_to_one_that_only_stores_it():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"), record("c", "m3"))
    fleet.model_cards["a"] = [{"id": "m1", "loaded": True}, {"id": "tiny", "loaded": False}]
    fleet.model_cards["b"] = [{"id": "m2", "loaded": True}, {"id": "tiny", "loaded": True}]
    fleet.model_cards["c"] = [{"id": "m3", "loaded": True}]
    assert ids(fleet.candidates("tiny")) == ["b"]
    assert ids(fleet.candidates("tiny:latest")) == ["b"]
    fleet.model_cards["b"][1]["loaded"] = False  # b unloaded it: both may load it, c never can
    assert ids(fleet.candidates("tiny")) == ["a", "b"]
    fleet.get("b").ready = False
    assert ids(fleet.candidates("tiny")) == ["a"]
    assert sorted(fleet.served_models()) == ["m1", "m2", "m3", "tiny"]


def test_a_models_aliases_route_to_its_workers_preferring_one_where_it_is_loaded():
    fleet, _ = fleet_of(record("a", "m1"), record("b", "m2"), record("c", "m3"))
    embed = {"id": "acme/All-MiniLM", "aliases": ["All-MiniLM", "all-minilm"]}
    fleet.model_cards["a"] = [{"id": "m1"}, {**embed, "loaded": False}]
    fleet.model_cards["b"] = [{"id": "m2"}, {**embed, "loaded": True}, {"id": "x", "aliases": "not-a-list"}]
    fleet.model_cards["c"] = [{"id": "m3"}]
    assert ids(fleet.candidates("all-minilm")) == ["b"]  # loaded there: no load to wait for
    assert ids(fleet.candidates("All-MiniLM:latest")) == ["b"]
    fleet.model_cards["b"][1]["loaded"] = False
    assert ids(fleet.candidates("all-minilm")) == ["a", "b"]  # c never has it
    assert sorted(fleet.served_models()) == ["acme/All-MiniLM", "m1", "m2", "m3", "x"]  # ids are listed, not aliases


def test_a_workers_own_model_it_says_it_unloaded_is_not_loaded_there():
    fleet, _ = fleet_of(record("a", "m"), record("b", "m"))
    fleet.model_cards["a"] = [{"id": "m", "loaded": False}]  # a keep_alive 0 unloaded it there
    fleet.model_cards["b"] = [{"id": "m", "loaded": True}]
    assert ids(fleet.candidates("m")) == ["b"]
    fleet.model_cards["b"] = []  # says nothing of it: its record's model is loaded, as before
    assert ids(fleet.candidates("m")) == ["b"]

