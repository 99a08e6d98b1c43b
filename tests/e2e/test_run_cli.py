"""`inferd run` as a person uses it, in a real terminal (a pty): a chat turn,
/clear and /exit. (One-shot answers: tests/unit/test_run_command.py.)"""

from __future__ import annotations

import os
import pty
import select
import sys
import time

from inferd.model_store import ModelStore
from inferd.model_store.importing import import_model

RUN = [sys.executable, "-m", "inferd.cli", "run", "--threads", "1", "--temperature", "0", "--max-tokens", "6"]


def read_until(fd: int, marker: bytes, seen: bytearray, timeout: float = 120) -> bytes:
    deadline = time.monotonic() + timeout
    start = len(seen)
    while marker not in seen[start:]:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"no {marker!r} within {timeout}s; the terminal shows: {bytes(seen)[-500:]!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            chunk = b""
        if not chunk:
            raise AssertionError(f"the terminal closed before {marker!r}: {bytes(seen)[-500:]!r}")
        seen += chunk
    return bytes(seen[start:])


def test_a_chat_turn_clear_and_exit_in_a_terminal(tiny_model_dir, tmp_path):
    data = tmp_path / "data"
    import_model(ModelStore(data / "models"), tiny_model_dir, name="tiny")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdin and stdout
        os.execv(sys.executable, [*RUN, "tiny", "--data-dir", str(data)])
    seen = bytearray()
    try:
        banner = read_until(fd, b">>> ", seen)
        assert b"chatting with tiny: /clear forgets the conversation, /exit" in banner
        os.write(fd, b"Hello there\n")
        turn = read_until(fd, b">>> ", seen)
        assert turn.startswith(b"Hello there\r\n")  # the terminal echoes the line, then the answer streams
        assert len(turn) > len(b"Hello there\r\n\r\n>>> ")  # the model said something
        os.write(fd, b"/clear\n")
        assert b"(conversation cleared)" in read_until(fd, b">>> ", seen)
        os.write(fd, b"/exit\n")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
    assert (data / "run_history").read_text().splitlines()[-3:] == ["Hello there", "/clear", "/exit"]

