"""Files, batches and jobs through a router with keys of its own and a worker
key: the router names each caller to the workers (x-inferd-on-behalf-of), so
two of its keys each see only their own; a worker takes that name only from
an admin key; each batch item's tokens are charged to the caller in the
router's usage ledger, exactly; and a listing merges every worker's, newest
first, paged with after/limit.

Two real workers (the tiny model, jobs under their own data dirs) behind one
round-robin router, all in this process."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import openai
import pytest

from inferd.config import RouterOptions
from inferd.models.loader import load_model
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from inferd.router.job_charges import claim_charges
from inferd.server.assemble import attach_jobs, start_jobs
from inferd.store.responses import ResponseStore
from polling import wait_for
from router_fakes import ServerThread
from served import served, small_config

WORKER_KEY = "w-secret"
ROUTER_ADMIN = "r-admin-secret"
ENDED = ("completed", "failed", "expired", "cancelled")


class Worker:
    def __init__(self, thread: ServerThread, server, jobs):
        self.thread, self.server, self.jobs = thread, server, jobs

    @property
    def url(self) -> str:
        return self.thread.url


@pytest.fixture(scope="module")
def workers(tiny_model_dir, tmp_path_factory):
    loaded = load_model(str(tiny_model_dir), dtype="float32")
    made, contexts = [], []
    for name in ("a", "b"):
        config = small_config(ctx_size=256, parallel=2, default_max_tokens=2,
                              data_dir=str(tmp_path_factory.mktemp(f"jobs-{name}")))
        context = served(loaded, config, api_keys=frozenset({WORKER_KEY}))
        server = context.__enter__()
        contexts.append(context)
        server.state.responses_store = ResponseStore.in_dir(config.data_dir, ttl=3600, max_rows=100)
        jobs = attach_jobs(server.app, server.state, config.data_dir)
        thread = ServerThread(server.app).start()
        thread.call(_start_jobs(server))
        made.append(Worker(thread, server, jobs))
    yield made
    for w, context in zip(made, contexts):
        w.thread.call(w.jobs.runner.stop())
        w.thread.stop()
        w.jobs.close()
        context.__exit__(None, None, None)


async def _start_jobs(server) -> None:
    start_jobs(server.app, server.state)


@pytest.fixture(scope="module")
def router(workers):
    options = RouterOptions(worker=[w.url for w in workers], policy="round-robin", health_interval=0,
                            worker_api_key=WORKER_KEY, api_key=[ROUTER_ADMIN])
    state = build_router_state(options)
    secrets = {name: state.tenants.ring.add(name, {})[1] for name in ("alice", "bob")}
    thread = ServerThread(build_router_app(state)).start()
    yield thread, state, secrets
    thread.stop()


def as_key(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def upload(http: httpx.Client, secret: str, text: str, purpose: str = "batch") -> dict:
    r = http.post("/v1/files", files={"file": ("input.jsonl", text.encode())}, data={"purpose": purpose},
                  headers=as_key(secret))
    assert r.status_code == 200, r.text
    return r.json()


def chat_line(custom_id: str) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"hi {custom_id}"}], "max_tokens": 2,
            "temperature": 0}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}) + "\n"


def test_two_router_keys_each_see_only_their_own_files_batches_and_jobs(router):
    thread, _, secrets = router
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        files = {who: upload(http, secrets[who], chat_line(f"{who}-1"))["id"] for who in ("alice", "bob")}
        batches = {}
        for who in ("alice", "bob"):
            r = http.post("/v1/batches", json={"input_file_id": files[who], "endpoint": "/v1/chat/completions",
                                               "completion_window": "24h"}, headers=as_key(secrets[who]))
            assert r.status_code == 200, r.text
            batches[who] = r.json()["id"]
        for who, other in (("alice", "bob"), ("bob", "alice")):
            mine = as_key(secrets[who])
            listed = {f["id"] for f in http.get("/v1/files", headers=mine).json()["data"]}
            assert files[who] in listed and files[other] not in listed
            assert http.get(f"/v1/files/{files[other]}", headers=mine).status_code == 404
            assert http.get(f"/v1/files/{files[who]}", headers=mine).status_code == 200
            assert [b["id"] for b in http.get("/v1/batches", headers=mine).json()["data"]].count(batches[other]) == 0
            assert batches[who] in [b["id"] for b in http.get("/v1/batches", headers=mine).json()["data"]]
            assert batches[who] in [j["id"] for j in http.get("/v1/jobs", headers=mine).json()["data"]]
            assert batches[other] not in [j["id"] for j in http.get("/v1/jobs", headers=mine).json()["data"]]
            assert http.get(f"/v1/batches/{batches[other]}", headers=mine).status_code == 404
            assert http.post(f"/v1/batches/{batches[other]}/cancel", headers=mine).status_code == 404


def test_a_worker_takes_the_owner_header_only_from_an_admin_key(workers):
    worker = workers[0]
    _, carol = worker.server.state.tenants.ring.add("carol", {})  # an ordinary key of the worker's own
    with httpx.Client(base_url=worker.url, timeout=30) as http:
        mine = upload(http, carol, chat_line("carol-1"))["id"]
        spoken_for = http.post("/v1/files", files={"file": ("x.jsonl", chat_line("x").encode())},
                               data={"purpose": "batch"},
                               headers={**as_key(WORKER_KEY), "x-inferd-on-behalf-of": "dora"}).json()["id"]
        for path in ("/v1/files", "/v1/batches", "/v1/jobs", "/v1/messages/batches", f"/v1/files/{spoken_for}"):
            r = http.get(path, headers={**as_key(carol), "x-inferd-on-behalf-of": "dora"})
            assert r.status_code == 403, (path, r.text)
            assert "x-inferd-on-behalf-of" in r.text
        # Without the header carol sees her own file, not the one made for dora; the worker key sees dora's
        # only when it speaks for dora.
        assert [f["id"] for f in http.get("/v1/files", headers=as_key(carol)).json()["data"]] == [mine]
        assert [f["id"] for f in http.get("/v1/files", headers={**as_key(WORKER_KEY), "x-inferd-on-behalf-of": "dora"}
                                          ).json()["data"]] == [spoken_for]
        assert spoken_for not in [f["id"] for f in http.get("/v1/files", headers=as_key(WORKER_KEY)).json()["data"]]
        bad = http.get("/v1/files", headers={**as_key(WORKER_KEY), "x-inferd-on-behalf-of": "no spaces"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-inferd-on-behalf-of"
        scoped = {**as_key(WORKER_KEY), "x-inferd-on-behalf-of": "dora", "x-inferd-on-behalf-scopes": "tiny"}
        one = [{"custom_id": "m", "params": {"model": "tiny", "max_tokens": 1,
                                              "messages": [{"role": "user", "content": "hi"}]}}]
        bad = http.post("/v1/messages/batches", json={"requests": one}, headers=scoped)
        assert bad.status_code == 400 and "x-inferd-on-behalf-scopes" in bad.text  # not a JSON list
        # Claiming charges is for admin keys too.
        assert http.post("/v1/job-charges/claim", headers=as_key(carol)).status_code == 403


def test_a_client_cannot_name_another_owner_through_the_router(router):
    thread, _, secrets = router
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        bobs = upload(http, secrets["bob"], chat_line("bob-hidden"))["id"]
        spoofed = {**as_key(secrets["alice"]), "x-inferd-on-behalf-of": "bob"}
        assert bobs not in [f["id"] for f in http.get("/v1/files", headers=spoofed).json()["data"]]
        assert http.get(f"/v1/files/{bobs}", headers=spoofed).status_code == 404


def test_batch_items_are_charged_to_their_caller_in_the_routers_ledger(router, workers):
    thread, state, secrets = router
    wait_for(lambda: not any(w.jobs.store.active() for w in workers), timeout=120)  # earlier tests' batches
    thread.call(claim_charges(state))  # and what they used is charged before this one counts
    before = _ledger_tokens(thread, state, "alice")
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        text = "".join(chat_line(f"alice-u{i}") for i in range(3))
        file_id = upload(http, secrets["alice"], text)["id"]
        r = http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                           "completion_window": "24h"}, headers=as_key(secrets["alice"]))
        batch_id = r.json()["id"]
        batch = wait_for(lambda: (b := http.get(f"/v1/batches/{batch_id}", headers=as_key(secrets["alice"])).json())
                         ["status"] in ENDED and b, timeout=120)
        errors = http.get(f"/v1/files/{batch['error_file_id']}/content", headers=as_key(secrets["alice"])).text \
            if batch.get("error_file_id") else ""
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 3, (batch, errors)
        output = http.get(f"/v1/files/{batch['output_file_id']}/content", headers=as_key(secrets["alice"])).text
    used = [json.loads(line)["response"]["body"]["usage"] for line in output.splitlines()]
    expected = (sum(u["prompt_tokens"] for u in used), sum(u["completion_tokens"] for u in used))
    assert expected[0] > 0 and expected[1] > 0
    target = (before[0] + expected[0], before[1] + expected[1], before[2] + 3)  # one request per item
    # The router's own pass over the workers (every CLAIM_SECONDS) brings them in; nothing here asks.
    after = wait_for(lambda: (t := _ledger_tokens(thread, state, "alice")) == target and t, timeout=30)
    assert after == target, (_ledger_tokens(thread, state, "alice"), target)
    assert thread.call(claim_charges(state)) == 0  # each charge is claimed once
    # /api/usage through the router shows them under alice's key.
    with httpx.Client(base_url=thread.url, timeout=30) as http:
        rows = http.get("/api/usage", headers=as_key(ROUTER_ADMIN), params={"key": "alice"}).json()
    assert rows["totals"]["prompt_tokens"] == after[0] and rows["totals"]["completion_tokens"] == after[1]


def _ledger_tokens(thread, state, key: str) -> tuple[int, int, int]:
    async def read():
        rows = await asyncio.to_thread(state.tenants.ledger.usage, key)
        return (sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows),
                sum(r.requests for r in rows))

    return thread.call(read())


def test_listings_merge_every_workers_newest_first_and_page_without_gaps(router, workers):
    thread, _, _ = router
    secret = thread_key(router, "carl")
    carl = as_key(secret)
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        made = [upload(http, secret, chat_line(f"carl-{i}"), purpose="user_data")["id"] for i in range(5)]
        held = {w.url: {f.id for f in w.jobs.store.files("carl")} for w in workers}
        assert all(held.values()), held  # round robin: both workers hold some
        for order in ("desc", "asc"):
            whole = http.get("/v1/files", headers=carl, params={"order": order}).json()["data"]
            times = [f["created_at"] for f in whole]
            assert sorted(f["id"] for f in whole) == sorted(made)
            assert times == sorted(times, reverse=order == "desc")
            # Each worker's own files keep their order (within a second too: files show whole seconds).
            for ids in held.values():
                mine = [f["id"] for f in whole if f["id"] in ids]
                assert mine == [i for i in (made[::-1] if order == "desc" else made) if i in ids]
            expected = [f["id"] for f in whole]
            seen, after, pages = [], None, 0
            while True:
                page = http.get("/v1/files", headers=carl,
                                params={"limit": 2, "order": order, **({"after": after} if after else {})}).json()
                seen += [f["id"] for f in page["data"]]
                pages += 1
                if not page["has_more"]:
                    break
                after = page["last_id"]
            assert seen == expected and pages == 3, (order, seen)
        r = http.get("/v1/files", headers=carl, params={"limit": 0})
        assert r.status_code == 400 and r.json()["error"]["param"] == "limit"

        requests = [{"custom_id": "m", "params": {"model": "tiny", "max_tokens": 1,
                                                   "messages": [{"role": "user", "content": "hi"}]}}]
        batches = []
        for _ in range(4):
            r = http.post("/v1/messages/batches", json={"requests": requests}, headers=carl)
            assert r.status_code == 200, r.text
            batches.append(r.json()["id"])
        newest_first = batches[::-1]
        first = http.get("/v1/messages/batches", headers=carl, params={"limit": 3}).json()
        assert [b["id"] for b in first["data"]] == newest_first[:3] and first["has_more"]
        rest = http.get("/v1/messages/batches", headers=carl, params={"limit": 3, "after_id": first["last_id"]}).json()
        assert [b["id"] for b in rest["data"]] == newest_first[3:] and not rest["has_more"]
        back = http.get("/v1/messages/batches", headers=carl, params={"limit": 2, "before_id": newest_first[3]}).json()
        assert [b["id"] for b in back["data"]] == newest_first[1:3] and back["has_more"]
        jobs = http.get("/v1/jobs", headers=carl, params={"limit": 3}).json()
        assert [j["id"] for j in jobs["data"]] == newest_first[:3] and jobs["has_more"]
        jobs = http.get("/v1/jobs", headers=carl, params={"limit": 3, "after": jobs["last_id"]}).json()
        assert [j["id"] for j in jobs["data"]] == newest_first[3:] and not jobs["has_more"]
        unknown = http.get("/v1/jobs", headers=carl, params={"after": "batch_nosuchbatch"}).json()
        assert unknown["data"] == [] and not unknown["has_more"]
    # The official SDKs page through the merged listings by themselves.
    sdk = openai.OpenAI(base_url=f"{thread.url}/v1", api_key=secret, max_retries=0)
    assert sorted(f.id for f in sdk.files.list(limit=2)) == sorted(made)
    assert [f.id for f in sdk.files.list(limit=2, order="desc")] == [f.id for f in sdk.files.list(order="desc")]
    claude = anthropic.Anthropic(base_url=thread.url, api_key=secret, max_retries=0)
    assert [b.id for b in claude.messages.batches.list(limit=1)] == newest_first


def thread_key(router, name: str) -> str:
    """A router key made for one test (its secret)."""
    _, state, secrets = router
    if name not in secrets:
        secrets[name] = state.tenants.ring.add(name, {})[1]
    return secrets[name]


def test_a_background_response_is_charged_what_its_run_used(router, workers):
    thread, state, secrets = router
    wait_for(lambda: not any(w.jobs.store.active() for w in workers), timeout=120)
    thread.call(claim_charges(state))
    before = _ledger_tokens(thread, state, "bob")
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        r = http.post("/v1/responses", json={"model": "tiny", "input": "hello there", "max_output_tokens": 2,
                                             "background": True, "store": True}, headers=as_key(secrets["bob"]))
        assert r.status_code == 200 and r.json()["status"] == "queued", r.text
        rid = r.json()["id"]
        done = wait_for(lambda: (b := http.get(f"/v1/responses/{rid}", headers=as_key(secrets["bob"])).json())
                        ["status"] in ("completed", "incomplete", "failed", "cancelled") and b, timeout=120)
    assert done and done["status"] in ("completed", "incomplete"), done  # incomplete: its 2 tokens ran out
    wait_for(lambda: not any(w.jobs.store.active() for w in workers), timeout=60)
    thread.call(claim_charges(state))
    after = _ledger_tokens(thread, state, "bob")
    usage = done["usage"]
    # The queued answer is charged nothing (its estimate would count the prompt twice); the run its tokens.
    assert (after[0] - before[0], after[1] - before[1]) == (usage["input_tokens"], usage["output_tokens"])
    assert after[2] - before[2] == 1  # the request that queued it; its run adds no second one


def test_batch_items_are_held_to_the_callers_model_scopes(router, workers):
    thread, state, secrets = router
    if "sam" not in secrets:
        secrets["sam"] = state.tenants.ring.add("sam", {"scopes": ["another-model"]})[1]
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        file_id = upload(http, secrets["sam"], chat_line("sam-1"))["id"]
        r = http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                           "completion_window": "24h"}, headers=as_key(secrets["sam"]))
        batch_id = r.json()["id"]
        batch = wait_for(lambda: (b := http.get(f"/v1/batches/{batch_id}", headers=as_key(secrets["sam"])).json())
                         ["status"] in ENDED and b, timeout=120)
        assert batch and batch["request_counts"] == {"total": 1, "completed": 0, "failed": 1}, batch
        (line,) = http.get(f"/v1/files/{batch['error_file_id']}/content", headers=as_key(secrets["sam"])).text.splitlines()
    answer = json.loads(line)["response"]
    assert answer["status_code"] == 403 and answer["body"]["error"]["code"] == "model_not_allowed"
    assert "'another-model'" in answer["body"]["error"]["message"]


def test_batch_items_are_held_to_the_callers_limits(router, workers):
    thread, state, secrets = router
    if "dora" not in secrets:
        secrets["dora"] = state.tenants.ring.add("dora", {"daily_tokens": 1})[1]
    with httpx.Client(base_url=thread.url, timeout=60) as http:
        file_id = upload(http, secrets["dora"], chat_line("dora-1"))["id"]
        r = http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                           "completion_window": "24h"}, headers=as_key(secrets["dora"]))
        assert r.status_code == 200, r.text
        batch_id = r.json()["id"]
        batch = wait_for(lambda: (b := http.get(f"/v1/batches/{batch_id}", headers=as_key(secrets["dora"])).json())
                         ["status"] in ENDED and b, timeout=120)
        assert batch and batch["request_counts"] == {"total": 1, "completed": 0, "failed": 1}, batch
        (line,) = http.get(f"/v1/files/{batch['error_file_id']}/content",
                           headers=as_key(secrets["dora"])).text.splitlines()
    answer = json.loads(line)["response"]
    assert answer["status_code"] == 429 and answer["body"]["error"]["code"] == "rate_limit_exceeded"
    assert "daily allowance of 1" in answer["body"]["error"]["message"]


def test_a_worker_refuses_limits_that_are_not_limits(workers):
    eve = {**as_key(WORKER_KEY), "x-inferd-on-behalf-of": "eve"}
    with httpx.Client(base_url=workers[0].url, timeout=60) as http:
        r = http.post("/v1/files", files={"file": ("input.jsonl", chat_line("eve-1").encode())},
                      data={"purpose": "batch"}, headers=eve)
        r = http.post("/v1/batches", json={"input_file_id": r.json()["id"], "endpoint": "/v1/chat/completions",
                                           "completion_window": "24h"},
                      headers={**eve, "x-inferd-on-behalf-limits": '{"rpm": -1}'})
    assert r.status_code == 400 and r.json()["error"]["param"] == "x-inferd-on-behalf-limits"
