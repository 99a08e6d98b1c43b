"""The layout holds: import contracts (pyproject's [tool.importlinter]) and a
router that never loads torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint_imports = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    result = subprocess.run([sys.executable, "-c", lint_imports, "--config", str(ROOT / "pyproject.toml")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_router_command_and_app_load_no_torch():
    probe = """
import json, sys
import inferd.cli, inferd.commands.router  # what `inferd router` imports
from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
app = build_router_app(build_router_state(RouterOptions(worker=["http://127.0.0.1:9"])), manage=False)
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "inferd.engine")))))
"""
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_the_registry_reaches_no_engine():
    probe = "import json, sys, inferd.api.registry; print(json.dumps(sorted(m for m in sys.modules if m.startswith(('torch', 'inferd.engine', 'inferd.serving.state')))))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
