"""Start-up failures of a real `inferd serve` / `inferd router` (issue 15):
one clear line and a non-zero exit, no traceback, before any weights load."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def inferd(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    return subprocess.run([sys.executable, "-m", "inferd.cli", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=env, check=False)


def test_a_data_dir_that_is_a_file_is_one_line_and_exit_non_zero(tmp_path, tiny_model_dir):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("")
    done = inferd("serve", "--model", str(tiny_model_dir), "--port", "0", "--data-dir", str(not_a_dir))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert str(not_a_dir) in done.stderr and "--data-dir" in done.stderr


@pytest.mark.parametrize("command", [["serve", "--model", "{model}", "--data-dir", "{tmp}/data"],
                                     ["router", "--worker", "http://127.0.0.1:1", "--health-interval", "0"]])
def test_a_port_in_use_is_the_clear_message_only(tmp_path, tiny_model_dir, command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = inferd(*[a.format(tmp=tmp_path, model=tiny_model_dir) for a in command], "--port", str(port))
    assert done.returncode != 0
    assert "address already in use" in done.stderr
    assert "Traceback" not in done.stderr and "exception was never retrieved" not in done.stderr, done.stderr
