"""What `inferd serve` imports before it can answer (issue 16: warm start).
Every module imported at start-up is paid on every start; these stay out of
it until a command that uses them runs."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(statement: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of `candidates` a fresh interpreter holds after running `statement`."""
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {list(candidates)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_command_line_imports_no_torch_and_no_http_client():
    # `inferd --help`, `ps` and `keys` stay quick; serve imports torch once it starts loading.
    assert modules_after("import inferd.cli", ("torch", "httpx", "rich")) == []


def test_serving_imports_no_http_client():
    # httpx (~0.2 s with the rich it pulls in) is for the client commands and the router only.
    assert modules_after("import inferd.cli, inferd.commands.serve", ("httpx", "rich")) == []
