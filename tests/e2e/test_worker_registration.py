"""`inferd serve --register etcd://...` against a real etcd: the key appears
with the worker's record once it is healthy and outlives its TTL while the
worker lives; SIGTERM deletes it before the drain while an in-flight stream
still completes; a SIGKILLed worker's key leaves with its lease."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from inferd.discovery.record import WorkerRecord, worker_key
from polling import wait_for
from server import ServerProcess

aetcd = pytest.importorskip("aetcd", reason="the etcd extra is not installed (pip install 'inferd[etcd]')")

TTL = 2
COMPLETIONS = "/v1/completions"


def etcd_get(etcd, key: bytes):
    """The key's KeyValue (value, lease) or None."""

    async def go():
        async with aetcd.Client(etcd.host, etcd.port, timeout=5) as client:
            return await client.get(key)

    return asyncio.run(go())


def lease_ttl(etcd, lease_id: int) -> int:
    async def go():
        async with aetcd.Client(etcd.host, etcd.port, timeout=5) as client:
            return (await client.get_lease_info(lease_id, keys=False)).grantedTTL

    return asyncio.run(go())


def registered_server(tiny_model_dir, etcd, server_logs, name: str, **kwargs) -> ServerProcess:
    prefix = f"/test-{name}/workers/"  # one prefix per test: no test sees another's worker
    server = ServerProcess(
        tiny_model_dir, parallel=2, ctx_size=512, log_path=server_logs / f"register-{name}.log",
        extra_args=["--register", etcd.address, "--register-ttl", str(TTL), "--register-prefix", prefix], **kwargs,
    )
    server.prefix = prefix
    return server


def key_of(server: ServerProcess) -> bytes:
    return worker_key(server.prefix, f"127.0.0.1-{server.port}")


def test_a_healthy_worker_is_in_etcd_with_its_record_and_stays_past_its_ttl(tiny_model_dir, etcd_server, server_logs):
    with registered_server(tiny_model_dir, etcd_server, server_logs, "record") as server:
        key = key_of(server)
        kv = wait_for(lambda: etcd_get(etcd_server, key), timeout=10.0)
        assert kv is not None, f"no key {key!r} in etcd:\n{server.log_tail()}"
        assert WorkerRecord.from_json(kv.value) == WorkerRecord(
            id=f"127.0.0.1-{server.port}", url=server.base_url, model=server.model_name, parallel=2, block_size=16,
            capabilities=["kv-events"],
        )
        assert json.loads(kv.value)["url"] == f"http://127.0.0.1:{server.port}"
        assert kv.lease != 0 and lease_ttl(etcd_server, kv.lease) == TTL
        log = server.log()
        assert log.index("INFO inferd.serve: loaded ") < log.index("registered in"), "registered while loading"
        time.sleep(2 * TTL)  # the behaviour under test: past twice its TTL, refreshed every TTL/3, the key stays
        later = etcd_get(etcd_server, key)
        assert later is not None and later.lease == kv.lease and later.mod_revision == kv.mod_revision


def test_sigterm_leaves_etcd_first_and_the_in_flight_stream_still_completes(tiny_model_dir, etcd_server, server_logs):
    server = registered_server(tiny_model_dir, etcd_server, server_logs, "sigterm", shutdown_timeout=60)
    server.start()
    key = key_of(server)
    lines: list[str] = []
    result: dict[str, object] = {}
    first = threading.Event()
    body = {"prompt": "Hello", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}

    def stream():
        try:
            with server.http() as client, client.stream("POST", COMPLETIONS, json=body) as r:
                for line in r.iter_lines():
                    if line:
                        lines.append(line)
                        first.set()
            result["ok"] = True
        except Exception as e:  # reported by the assertions below
            result["error"] = e
        first.set()

    events: list[dict] = []
    watching = threading.Event()

    def kv_events():  # an open event stream must not hold the drain up
        try:
            with server.http() as client, client.stream("GET", "/v1/kv-events") as r:
                for line in r.iter_lines():
                    events.append(json.loads(line))
                    watching.set()
            result["events_ended"] = True
        except Exception as e:
            result["events_error"] = e
        watching.set()

    reader, watcher = threading.Thread(target=stream), threading.Thread(target=kv_events)
    try:
        assert wait_for(lambda: etcd_get(etcd_server, key), timeout=10.0), server.log_tail()
        watcher.start()
        assert watching.wait(30), "the event stream never started"
        reader.start()
        assert first.wait(30), "the stream never started"
        server.terminate()
        gone = wait_for(lambda: etcd_get(etcd_server, key) is None, timeout=10.0, interval=0.005)
        alive_when_gone, lines_when_gone = server.returncode is None, len(lines)
        reader.join(60)
        watcher.join(60)
        code = server.wait(30)  # well inside --shutdown-timeout 60: nothing held the drain
    finally:
        server.kill()

    assert gone, f"the key outlived SIGTERM:\n{server.log_tail()}"
    assert alive_when_gone, "the process exited before the key was deleted"
    assert "error" not in result, f"the in-flight stream failed: {result['error']!r}"
    assert lines[-1] == "data: [DONE]"
    assert lines_when_gone < len(lines), "the stream had finished before the key was deleted"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0].get("finish_reason")] == ["length"]
    assert "events_error" not in result and result.get("events_ended"), result.get("events_error")
    assert events[0] == {"type": "snapshot", "block_size": 16, "hashes": [], "active_blocks": 0}
    assert {e["type"] for e in events[1:]} <= {"update", "ping"}
    assert "deregistered " in server.log() and "Traceback" not in server.log(), server.log_tail()
    assert code == 0, f"inferd serve exited with {code} after SIGTERM:\n{server.log_tail()}"


def test_a_killed_worker_leaves_when_its_lease_expires(tiny_model_dir, etcd_server, server_logs):
    server = registered_server(tiny_model_dir, etcd_server, server_logs, "sigkill")
    server.start()
    key = key_of(server)
    try:
        assert wait_for(lambda: etcd_get(etcd_server, key), timeout=10.0), server.log_tail()
    finally:
        server.kill()
    # etcd expires leases on its own clock: the TTL, plus slack for a loaded machine.
    assert wait_for(lambda: etcd_get(etcd_server, key) is None, timeout=TTL + 8.0, interval=0.1), \
        "the key outlived its lease"
