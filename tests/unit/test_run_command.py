"""`inferd run NAME PROMPT` in process: a stored model answers once; a
Hugging Face name not stored yet is pulled first (from a hub-shaped server)."""

from __future__ import annotations

import pytest

from hub_server import HubServer
from inferd.cli import main
from inferd.model_store import ModelStore

ARGS = ["--threads", "1", "--temperature", "0", "--max-tokens", "4", "--dtype", "float32"]


@pytest.fixture(scope="module")
def hub(tiny_model_dir):
    with HubServer() as hub:
        hub.add_repo("acme/tiny", {p.name: p.read_bytes() for p in tiny_model_dir.iterdir()})
        yield hub


def test_one_shot_pulls_a_missing_model_then_answers(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert main(["run", "acme/tiny", "Hello", "--data-dir", str(tmp_path), *ARGS]) == 0
    out, err = capsys.readouterr()
    assert "pulling manifest" in err and "success" in err
    assert out.strip()  # the answer
    assert ModelStore(tmp_path / "models").get("acme/tiny") is not None
    sent = dict(hub.sent)
    assert main(["run", "acme/tiny", "Hello again", "--data-dir", str(tmp_path), *ARGS]) == 0
    assert hub.sent == sent  # stored now: nothing fetched
    assert "pulling" not in capsys.readouterr().err


def test_a_name_that_is_not_stored_and_not_on_the_hub_is_one_line(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert main(["run", "tiny-thing", "Hello", "--data-dir", str(tmp_path), *ARGS]) == 1
    assert "inferd run: model 'tiny-thing' is neither a local path" in capsys.readouterr().err
    assert main(["run", "acme/absent", "Hello", "--data-dir", str(tmp_path), *ARGS]) == 1
    assert "inferd run: acme/absent is not a model repository on http://127.0.0.1" in capsys.readouterr().err
