"""The garbage collector is held off while `inferd serve` or `inferd router`
starts (issue 16: warm start), and runs again, with start-up's objects
frozen, once it listens."""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
import textwrap

import pytest

from inferd import startup_collector


@pytest.fixture
def collector_restored():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()  # a frozen test process would never collect what it holds now
    (gc.enable if enabled else gc.disable)()
    startup_collector._paused = False


def test_pause_then_resume_collects_again(collector_restored):
    gc.enable()
    startup_collector.pause()
    assert not gc.isenabled()
    startup_collector.resume()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_resume_with_freeze_freezes_what_exists(collector_restored):
    gc.enable()
    startup_collector.pause()
    startup_collector.resume(freeze=True)
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_resume_undoes_only_a_pause(collector_restored):
    gc.enable()
    startup_collector.resume(freeze=True)  # nothing paused: nothing frozen
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()  # off for another reason: left off
    startup_collector.pause()
    startup_collector.resume()
    assert not gc.isenabled()


def test_a_serve_that_stops_at_a_check_leaves_the_collector_on(collector_restored, monkeypatch):
    from inferd.cli import main

    gc.enable()
    monkeypatch.setenv("INFERD_API_KEY", "")
    with pytest.raises(SystemExit):
        main(["serve", "--port", "0"])
    assert gc.isenabled() and gc.get_freeze_count() == 0


def listening_state(port: int, command: list[str]) -> dict:
    """The collector's state in a process running `inferd COMMAND`, once it answers /health."""
    script = textwrap.dedent(f"""
        import gc, json, os, sys, threading, time
        import httpx
        from inferd.cli import main

        def watch():
            while True:
                try:
                    if httpx.get("http://127.0.0.1:{port}/health", timeout=5).status_code in (200, 503):
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            for _ in range(600):  # collecting resumes once it listens, soon after health answers
                if gc.isenabled():
                    break
                time.sleep(0.1)
            print(json.dumps({{"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}}), flush=True)
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
        gc.enable()
        main({command!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listening_router_collects_with_its_start_up_frozen(tmp_path):
    port = free_port()
    state = listening_state(port, ["router", "--worker", f"http://127.0.0.1:{free_port()}", "--port", str(port),
                                   "--data-dir", str(tmp_path / "data")])
    assert state["enabled"] is True and state["frozen"] > 10_000


def test_a_listening_server_collects_with_its_start_up_frozen(tiny_model_dir, tmp_path):
    port = free_port()
    state = listening_state(port, ["serve", "--model", str(tiny_model_dir), "--port", str(port),
                                   "--data-dir", str(tmp_path / "data")])
    assert state["enabled"] is True
    assert state["frozen"] > 10_000  # torch, FastAPI and the app: far more than this
