"""A batch survives SIGKILL: the server is killed in the middle of a
100-item batch and started again on the same data dir; the batch completes
with exactly 100 results, each custom_id once, and the items finished before
the kill are the ones kept (written once, never run again)."""

from __future__ import annotations

import json
import sqlite3
import time

import openai
import pytest

from polling import wait_for
from server import TINY_CTX, ServerProcess

ITEMS = 100
TOKENS = 16
MAX_FILE = 64 * 1024


def start(model_dir, data_dir, log_path) -> ServerProcess:
    server = ServerProcess(model_dir, port=0, parallel=4, ctx_size=TINY_CTX, log_path=log_path,
                           extra_args=["--data-dir", str(data_dir), "--max-file-size", str(MAX_FILE)])
    server.start()
    return server


@pytest.mark.slow
def test_a_batch_killed_mid_run_completes_after_a_restart(tiny_model_dir, tmp_path):
    data = tmp_path / "data"
    text = "".join(json.dumps({"custom_id": f"item-{i}", "method": "POST", "url": "/v1/completions",
                               "body": {"prompt": f"count {i}", "max_tokens": TOKENS, "ignore_eos": True,
                                        "temperature": 0}}) + "\n" for i in range(ITEMS))
    first = start(tiny_model_dir, data, tmp_path / "first.log")
    try:
        c = first.openai()
        with pytest.raises(openai.APIStatusError, match="exceeds 65536 bytes") as refused:
            c.files.create(file=("big.jsonl", b"x" * (MAX_FILE + 1)), purpose="batch")
        assert refused.value.status_code == 413
        f = c.files.create(file=("input.jsonl", text.encode()), purpose="batch")
        batch = c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
        done_before = wait_for(lambda: (n := c.batches.retrieve(batch.id).request_counts.completed) >= 10 and n,
                               timeout=60.0, interval=0.02)
        assert done_before and done_before < ITEMS, done_before
    finally:
        first.kill()  # SIGKILL: no drain, no shutdown
    restarted_at = time.time()

    second = start(tiny_model_dir, data, tmp_path / "second.log")
    try:
        c = second.openai()
        ended = wait_for(lambda: (b := c.batches.retrieve(batch.id)).status in ("completed", "failed") and b,
                         timeout=120.0, interval=0.1)
        assert ended and ended.status == "completed", ended
        assert (ended.request_counts.total, ended.request_counts.completed) == (ITEMS, ITEMS)
        output = [json.loads(x) for x in c.files.content(ended.output_file_id).text.splitlines()]
    finally:
        second.stop()
    assert sorted(o["custom_id"] for o in output) == sorted(f"item-{i}" for i in range(ITEMS))
    assert all(o["response"]["body"]["usage"]["completion_tokens"] == TOKENS for o in output)
    with sqlite3.connect(data / "jobs.sqlite3") as db:
        kept = db.execute("SELECT COUNT(*) FROM items WHERE job_id = ? AND finished_at < ?",
                          (batch.id, restarted_at)).fetchone()[0]
    assert done_before <= kept < ITEMS  # what was done before the kill stayed done; the rest ran after
