"""The job plane without a model: the store's once-only item results, the
runner's course (validation, retries, cancel, expiry, resume after a crash),
the lock that keeps two runners off one data dir, and the batch input file's
line-numbered refusals."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from inferd.jobs.batch_input import parse_batch_input
from inferd.jobs.lock import RunnerLock
from inferd.jobs.runner import InvalidInput, JobKind, JobRunner, Retry
from inferd.jobs.store import ItemResult, JobStore

URL = "/v1/chat/completions"


def line(custom_id, url=URL, **body):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "m", **body}})


@pytest.fixture
def store(tmp_path):
    s = JobStore.in_dir(tmp_path)
    yield s
    s.close()


def items(n):
    return [(f"c{i}", {"i": i}) for i in range(n)]


def ok(item):
    return ItemResult("succeeded", 200, {"echo": item.request["i"]}, f"req-{item.idx}")


async def until_ended(store, id, timeout=5.0):
    deadline = time.monotonic() + timeout
    while store.get(id).active:
        assert time.monotonic() < deadline, store.get(id)
        await asyncio.sleep(0.01)
    return store.get(id)


def test_an_item_result_is_written_once_with_its_done_state(store):
    store.create("b1", "batch", "", URL, {}, state="in_progress", items=items(3))
    assert store.finish_item("b1", 1, ItemResult("succeeded", 200, {"x": 1}))
    assert not store.finish_item("b1", 1, ItemResult("errored", 500, {"x": 2}))
    assert [i.idx for i in store.pending_items("b1")] == [0, 2]
    (done,) = store.items("b1")
    assert (done.custom_id, done.state, done.status_code, done.response) == ("c1", "succeeded", 200, {"x": 1})
    assert store.get("b1").counts == {"pending": 2, "succeeded": 1}


def test_a_key_sees_only_its_own_jobs_newest_first_and_paged(store):
    for i in range(5):
        store.create(f"j{i}", "batch", "alice" if i % 2 == 0 else "bob", URL, {})
    assert [j.id for j in store.list("alice")] == ["j4", "j2", "j0"]
    assert [j.id for j in store.list("alice", after="j4", limit=1)] == ["j2"]
    assert store.get("j1", owner="alice") is None and store.get("j1", owner="bob").id == "j1"


def test_a_job_runs_every_item_and_records_its_events(store):
    async def main():
        seen = []

        async def dispatch(job, item):
            seen.append(item.idx)
            return ok(item)

        finished = []

        async def finish(job):
            finished.append(dict(job.counts))
            return {"output_file_id": "file-x"}

        async def prepare(job):
            return items(7)

        runner = JobRunner(store, dispatch, {"batch": JobKind(prepare=prepare, finish=finish)}, concurrency=3)
        store.create("b", "batch", "", URL, {})
        runner.start()
        job = await until_ended(store, "b")
        await runner.stop()
        return seen, finished, job

    seen, finished, job = asyncio.run(main())
    assert sorted(seen) == list(range(7))
    assert finished == [{"succeeded": 7}]
    assert (job.state, job.total, job.result) == ("completed", 7, {"output_file_id": "file-x"})
    assert {"in_progress_at", "finalizing_at", "completed_at"} <= set(job.times)
    types = [e["type"] for e in store.events("b")]
    assert types[:2] == ["created", "started"] and types[-2:] == ["finalizing", "finished"]
    assert store.events("b")[-1]["data"] == {"state": "completed", "succeeded": 7}


def test_invalid_input_fails_the_job_with_its_errors(store):
    async def main():
        async def prepare(job):
            raise InvalidInput([{"code": "invalid_json_line", "message": "bad", "param": None, "line": 3}])

        runner = JobRunner(store, None, {"batch": JobKind(prepare=prepare)}, concurrency=1)
        store.create("b", "batch", "", URL, {})
        runner.start()
        job = await until_ended(store, "b")
        await runner.stop()
        return job

    job = asyncio.run(main())
    assert job.state == "failed" and job.result["errors"][0]["line"] == 3 and job.total == 0


def test_an_item_that_cannot_run_now_is_retried(store):
    async def main():
        tries = {}

        async def dispatch(job, item):
            tries[item.idx] = tries.get(item.idx, 0) + 1
            if tries[item.idx] < 3:
                raise Retry(0.01, "queue full")
            return ok(item)

        runner = JobRunner(store, dispatch, {"batch": JobKind()}, concurrency=2)
        store.create("b", "batch", "", URL, {}, state="in_progress", items=items(4))
        runner.start()
        job = await until_ended(store, "b")
        await runner.stop()
        return tries, job

    tries, job = asyncio.run(main())
    assert tries == {0: 3, 1: 3, 2: 3, 3: 3}
    assert job.counts == {"succeeded": 4}


def test_cancel_stops_running_items_and_cancels_the_rest(store):
    async def main():
        started, stopped = asyncio.Event(), []

        async def dispatch(job, item):
            if item.idx < 2:
                return ok(item)
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                stopped.append(item.idx)
                raise

        runner = JobRunner(store, dispatch, {"batch": JobKind()}, concurrency=2)
        store.create("b", "batch", "", URL, {}, state="in_progress", items=items(10))
        runner.start()
        await asyncio.wait_for(started.wait(), 5)
        assert await runner.cancel("b")
        job = await until_ended(store, "b")
        again = await runner.cancel("b")
        await runner.stop()
        return stopped, job, again

    stopped, job, again = asyncio.run(main())
    assert stopped  # the items in flight were interrupted, not waited for
    assert job.state == "cancelled" and not again
    assert job.counts == {"succeeded": 2, "canceled": 8}
    assert {"cancelling_at", "cancelled_at"} <= set(job.times)


def test_a_job_past_its_window_expires_with_its_finished_items_kept(store):
    async def main():
        async def dispatch(job, item):
            if item.idx == 0:
                return ok(item)
            await asyncio.sleep(60)

        runner = JobRunner(store, dispatch, {"batch": JobKind()}, concurrency=1)
        store.create("b", "batch", "", URL, {}, state="in_progress", expires_at=time.time() + 0.3, items=items(5))
        runner.start()
        job = await until_ended(store, "b")
        await runner.stop()
        return job

    job = asyncio.run(main())
    assert job.state == "expired"
    assert job.counts == {"succeeded": 1, "expired": 4}


def test_a_restarted_runner_runs_only_what_was_not_done(store, tmp_path):
    store.create("b", "batch", "", URL, {}, state="in_progress", items=items(5))
    for idx in (0, 3):
        store.finish_item("b", idx, ItemResult("succeeded", 200, {"echo": idx}))
    store.close()

    async def main():
        reopened = JobStore.in_dir(tmp_path)
        ran = []

        async def dispatch(job, item):
            ran.append(item.idx)
            return ok(item)

        runner = JobRunner(reopened, dispatch, {"batch": JobKind()}, concurrency=4)
        runner.start()
        job = await until_ended(reopened, "b")
        await runner.stop()
        results = [(i.custom_id, i.response) for i in reopened.items("b")]
        reopened.close()
        return ran, job, results

    ran, job, results = asyncio.run(main())
    assert sorted(ran) == [1, 2, 4]
    assert job.counts == {"succeeded": 5}
    assert results == [(f"c{i}", {"echo": i}) for i in range(5)]


def test_one_runner_per_data_dir(tmp_path):
    first, second = RunnerLock(tmp_path / "jobs.lock"), RunnerLock(tmp_path / "jobs.lock")
    assert first.try_acquire() and not second.try_acquire()
    first.release()
    assert second.try_acquire()
    second.release()


@pytest.mark.parametrize("text, line_no, code", [
    (line("a") + "\n{not json\n", 2, "invalid_json_line"),
    (line("a") + "\n" + line("b") + "\n" + line("a") + "\n", 3, "duplicate_custom_id"),
    (line("a", url="/v1/completions") + "\n", 1, "mismatched_url"),
    ("\n" + json.dumps({"method": "POST", "url": URL, "body": {}}) + "\n", 2, "missing_required_parameter"),
    (line("a", stream=True) + "\n", 1, "invalid_request"),
    (line("a") + "\n" + line("b", background=True) + "\n", 2, "invalid_request"),
    ("", 1, "empty_file"),
])
def test_a_bad_input_line_is_refused_with_its_number(text, line_no, code):
    accepted, errors = parse_batch_input(text.encode(), URL)
    assert accepted == []
    assert (errors[0].line, errors[0].code) == (line_no, code)
    assert str(line_no) in errors[0].message or code == "empty_file"


def test_a_good_input_file_gives_every_request_in_order():
    text = "".join(line(f"r{i}", messages=[{"role": "user", "content": str(i)}]) + "\n" for i in range(3))
    accepted, errors = parse_batch_input(text.encode(), URL)
    assert errors == []
    assert [(c, b["messages"][0]["content"]) for c, b in accepted] == [("r0", "0"), ("r1", "1"), ("r2", "2")]
