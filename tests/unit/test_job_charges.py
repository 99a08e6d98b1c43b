"""What a job made on another's behalf owes its owner: a charge per finished
item that reached a model, written with the item's result (so never twice),
handed out once; and the router's headers: its caller is named to the worker,
a client's own claim to be someone is never passed on."""

from __future__ import annotations

import pytest

from inferd.jobs.store import ItemResult, ItemUsage, JobStore
from inferd.router.http_headers import request_headers

URL = "/v1/chat/completions"


@pytest.fixture
def store(tmp_path):
    s = JobStore.in_dir(tmp_path)
    yield s
    s.close()


def test_an_item_of_a_job_made_for_another_is_charged_to_its_owner_once(store):
    job = store.create("b1", "batch", "alice", URL, {}, state="in_progress", items=[("c0", {}), ("c1", {})],
                       caller="router-key")
    assert (job.owner, job.caller, job.on_behalf) == ("alice", "router-key", True)
    used = ItemUsage("tiny", prompt=7, completion=3, cached=2)
    assert store.finish_item("b1", 0, ItemResult("succeeded", 200, {}, usage=used))
    assert not store.finish_item("b1", 0, ItemResult("succeeded", 200, {}, usage=used))  # already done: no charge
    assert store.finish_item("b1", 1, ItemResult("errored", 400, {}, usage=ItemUsage("tiny", 5)))
    first, second = store.claim_charges()
    assert (first.owner, first.model, first.prompt_tokens, first.completion_tokens, first.cached_tokens,
            first.error, first.job_id) == ("alice", "tiny", 7, 3, 2, False, "b1")
    assert (second.prompt_tokens, second.error) == (5, True)
    assert store.claim_charges() == []  # handed out once


def test_a_job_made_by_its_own_key_or_an_item_that_reached_no_model_owes_nothing(store):
    store.create("own", "batch", "alice", URL, {}, state="in_progress", items=[("c0", {})])
    assert store.get("own").caller == "alice" and not store.get("own").on_behalf
    store.finish_item("own", 0, ItemResult("succeeded", 200, {}, usage=ItemUsage("tiny", 4, 4)))
    store.create("b2", "batch", "alice", URL, {}, state="in_progress", items=[("c0", {})], caller="router-key")
    store.finish_item("b2", 0, ItemResult("errored", 400, {}))  # refused before any generation
    assert store.claim_charges() == []


def test_charges_are_claimed_a_page_at_a_time_oldest_first(store):
    store.create("b3", "batch", "bob", URL, {}, state="in_progress", items=[(f"c{i}", {}) for i in range(3)],
                 caller="w")
    for i in range(3):
        store.finish_item("b3", i, ItemResult("succeeded", 200, {}, usage=ItemUsage("m", prompt=i + 1)))
    assert [c.prompt_tokens for c in store.claim_charges(limit=2)] == [1, 2]
    assert [c.prompt_tokens for c in store.claim_charges(limit=2)] == [3]


def test_the_router_names_its_caller_and_drops_a_clients_own_claim():
    client = [(b"authorization", b"Bearer alice-secret"), (b"x-inferd-on-behalf-of", b"bob")]
    sent = request_headers([*client, (b"x-inferd-on-behalf-scopes", b'["any"]')], "w-secret", True,
                           on_behalf_of="alice", scopes=("tiny", "m2"))
    assert (b"x-inferd-on-behalf-of", b"alice") in sent and (b"x-inferd-on-behalf-of", b"bob") not in sent
    assert [v for n, v in sent if n == b"x-inferd-on-behalf-scopes"] == [b'["tiny", "m2"]']
    assert (b"authorization", b"Bearer w-secret") in sent
    # No keys at the router: nobody was identified, so nobody is named (and the client's claim is dropped).
    passed = request_headers(client, None, False)
    assert all(name != b"x-inferd-on-behalf-of" for name, _ in passed)


def test_a_job_keeps_the_scopes_of_the_owner_it_was_made_for(store):
    store.create("s", "batch", "alice", URL, {}, items=[("c0", {})], caller="w", scopes=("tiny",))
    store.create("n", "batch", "alice", URL, {}, items=[("c0", {})])
    assert store.get("s").scopes == ("tiny",) and store.get("n").scopes == ()


def test_a_job_stored_before_callers_were_kept_runs_as_its_owner(store):
    store.create("old", "batch", "alice", URL, {}, state="in_progress", items=[("c0", {})])
    with store._tx() as db:  # as a store made by an earlier version left it
        db.execute("UPDATE jobs SET caller = NULL WHERE id = 'old'")
    assert store.get("old").caller == "alice"
    store.finish_item("old", 0, ItemResult("succeeded", 200, {}, usage=ItemUsage("tiny", 4, 4)))
    assert store.claim_charges() == []
