"""The garbage collector is held off while `inferd serve` starts (issue 16:
warm start), and runs again, with start-up's objects frozen, once it listens."""

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


def test_a_listening_server_collects_with_its_start_up_frozen(tiny_model_dir, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = textwrap.dedent(f"""
        import gc, json, os, sys, threading, time
        import httpx
        from inferd.cli import main

        def watch():
            while True:
                try:
                    if httpx.get("http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            for _ in range(600):  # the server resumes collecting once it listens, soon after health answers
                if gc.isenabled():
                    break
                time.sleep(0.1)
            print(json.dumps({{"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}}), flush=True)
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()
        gc.enable()
        main(["serve", "--model", {str(tiny_model_dir)!r}, "--port", "{port}", "--data-dir", {str(tmp_path / "data")!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["enabled"] is True
    assert state["frozen"] > 10_000  # torch, FastAPI and the app: far more than this
