"""The store's small commands as a person types them (in process):
import, list/ls, show, cp, rm, and their errors as one line and exit 1."""

from __future__ import annotations

import json

import pytest

from hub_server import small_gguf
from inferd.cli import main


@pytest.fixture
def data(tmp_path):
    return str(tmp_path / "data")


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "Tiny-Q4_K_M.gguf"
    small_gguf(path)
    return path


def test_import_list_show_cp_rm(data, gguf, capsys):
    assert main(["import", str(gguf), "--name", "tiny:q4", "--data-dir", data]) == 0
    assert capsys.readouterr().out == "tiny:q4: gguf, 1 files hard-linked, 0.3 MB\n"

    assert main(["ls", "--data-dir", data]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "ID", "SIZE", "FORMAT", "QUANTIZATION", "CREATED"]
    assert [line.split()[0] for line in lines[1:]] == ["gemma-3-270m", "tiny:q4"]
    assert lines[2].split()[2:6] == ["262.5", "KB", "gguf", "Q4_K_M"]

    assert main(["list", "--json", "--data-dir", data]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["tag"]) for m in listed] == [("gemma-3-270m", "latest"), ("tiny", "q4")]

    assert main(["show", "tiny:q4", "--data-dir", data]) == 0
    shown = capsys.readouterr().out
    assert "  architecture    llama\n" in shown and "  licence         apache-2.0\n" in shown
    assert f"imported from {gguf}" in shown and "capabilities    completion, chat, tools" in shown
    assert main(["show", "tiny:q4", "--json", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["name"] == gguf.name

    assert main(["cp", "tiny:q4", "mine", "--data-dir", data]) == 0
    assert main(["rm", "tiny:q4", "mine", "--data-dir", data]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["deleted tiny:q4", "deleted mine"]
    assert main(["ls", "--json", "--data-dir", data]) == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)] == ["gemma-3-270m"]


def test_errors_are_one_line_and_exit_1(data, gguf, capsys):
    assert main(["show", "nothing", "--data-dir", data]) == 1
    assert capsys.readouterr().err.startswith("inferd show: model 'nothing' is not in the store (stored: gemma-3-270m)")
    assert main(["rm", "gemma-3-270m", "--data-dir", data]) == 1
    assert "is the bundled model" in capsys.readouterr().err
    assert main(["cp", "gemma-3-270m", "bad name", "--data-dir", data]) == 1
    assert "inferd cp: 'bad name' is not a model name" in capsys.readouterr().err
    assert main(["import", str(gguf.parent / "absent.gguf"), "--data-dir", data]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["pull", "llama3", "--data-dir", data]) == 1
    assert "inferd pulls from Hugging Face by repository" in capsys.readouterr().err
