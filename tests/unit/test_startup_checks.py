"""Start-up checks of `inferd serve` and `inferd router` (issue 15, items 5, 7
and 8): what would silently turn auth off, a store that cannot be opened, a
chat template that cannot work, and a port already taken end start-up at once
with one line saying what to change, before any weights load."""

from __future__ import annotations

import socket

import pytest

from inferd.commands import serve as serve_command
from inferd.commands.router import check_api_keys, run_router
from inferd.commands.serve import check_chat_template, read_api_keys, run_serve
from inferd.config import RouterOptions, ServeConfig


def one_line(exc: SystemExit) -> str:
    message = str(exc.code)
    assert message and "\n" not in message
    return message


# -- item 5: an empty API key ---------------------------------------------------

@pytest.mark.parametrize("keys", [[""], ["   "], ["good", ""], ["\t"]])
def test_an_empty_api_key_is_an_error_not_auth_off(keys):
    with pytest.raises(SystemExit) as caught:
        read_api_keys(ServeConfig(api_key=keys))
    message = one_line(caught.value)
    assert "--api-key" in message and "INFERD_API_KEY" in message and "empty" in message


def test_real_keys_and_a_key_file_still_read(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\nfile-key\n  \n")
    assert read_api_keys(ServeConfig(api_key=["a"], api_key_file=str(keys))) == {"a", "file-key"}
    assert read_api_keys(ServeConfig()) == frozenset()


def test_a_key_file_with_no_keys_is_an_error(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# nothing yet\n\n")
    with pytest.raises(SystemExit) as caught:
        read_api_keys(ServeConfig(api_key_file=str(keys)))
    assert str(keys) in one_line(caught.value)


def test_a_missing_key_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(SystemExit) as caught:
        read_api_keys(ServeConfig(api_key_file=str(tmp_path / "absent")))
    assert str(tmp_path / "absent") in one_line(caught.value)


@pytest.mark.parametrize("options, flag", [({"api_key": [""]}, "--api-key"), ({"api_key": [" "]}, "--api-key"),
                                           ({"worker_api_key": ""}, "--worker-api-key"),
                                           ({"worker_api_key": "  "}, "--worker-api-key")])
def test_the_router_refuses_empty_keys(options, flag):
    with pytest.raises(SystemExit) as caught:
        check_api_keys(RouterOptions(worker=["http://127.0.0.1:1"], **options))
    assert flag in one_line(caught.value)


def test_the_router_accepts_real_keys_and_none():
    check_api_keys(RouterOptions(api_key=["k"], worker_api_key="w"))
    check_api_keys(RouterOptions())


# -- item 8: the chat template is checked before the weights ----------------------

def test_an_unknown_built_in_template_fails_with_its_own_error():
    with pytest.raises(SystemExit) as caught:
        check_chat_template(ServeConfig(chat_template="no-such-template"))
    message = one_line(caught.value)
    assert "no-such-template" in message and "neither a built-in" in message


def test_a_template_file_that_does_not_compile_fails_with_its_own_error(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }}")  # no endfor
    with pytest.raises(SystemExit) as caught:
        check_chat_template(ServeConfig(chat_template=str(bad)))
    message = one_line(caught.value)
    assert str(bad) in message and "does not compile" in message


def test_good_templates_pass(tmp_path):
    good = tmp_path / "good.jinja"
    good.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    for name in (None, "chatml", str(good)):
        check_chat_template(ServeConfig(chat_template=name))


# -- run_serve / run_router fail before serving or loading anything ---------------

@pytest.fixture
def never_serve(monkeypatch):
    """Reaching the event loop (opening the socket, loading weights) fails the test instead of serving."""
    def reached(coro):
        coro.close()
        raise AssertionError("start-up went on to serve")

    monkeypatch.setattr(serve_command.event_loop, "run", reached)  # the one module both commands run their loop by
    monkeypatch.setattr(serve_command, "load_model", lambda *a, **k: pytest.fail("weights loaded"))


@pytest.mark.parametrize("broken", ["api_key", "chat_template", "data_dir_file", "corrupt_db"])
def test_run_serve_stops_at_the_broken_setting(tmp_path, tiny_model_dir, never_serve, broken):
    data = tmp_path / "data"
    options = {"model": str(tiny_model_dir), "data_dir": str(data), "port": 0}
    if broken == "api_key":
        options["api_key"] = [""]
    elif broken == "chat_template":
        options["chat_template"] = "nope"
    elif broken == "data_dir_file":
        data.write_text("")
    else:
        data.mkdir()
        (data / "responses.sqlite3").write_bytes(b"garbage" * 1000)
    with pytest.raises(SystemExit) as caught:
        run_serve(ServeConfig(**options))
    message = one_line(caught.value)
    if broken.startswith(("data_dir", "corrupt")):
        assert str(data) in message and "--data-dir" in message


def test_run_router_stops_at_an_empty_key(never_serve):
    with pytest.raises(SystemExit) as caught:
        run_router(RouterOptions(worker=["http://127.0.0.1:1"], api_key=[""], health_interval=0))
    assert "--api-key" in one_line(caught.value)


# -- item 8: a port already taken -----------------------------------------------------

@pytest.fixture
def taken_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_serve_on_a_taken_port_returns_non_zero(tmp_path, tiny_model_dir, taken_port, monkeypatch):
    monkeypatch.setattr(serve_command, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    assert run_serve(ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path / "d"), port=taken_port)) != 0


def test_router_on_a_taken_port_returns_non_zero(taken_port):
    assert run_router(RouterOptions(worker=["http://127.0.0.1:1"], port=taken_port, health_interval=0)) != 0


@pytest.mark.parametrize(("command", "variable"), [("serve", "INFERD_API_KEY"), ("router", "INFERD_API_KEY"),
                                                   ("router", "INFERD_WORKER_API_KEY")])
def test_a_key_variable_set_but_empty_is_an_error(monkeypatch, never_serve, command, variable):
    from inferd.cli import main

    monkeypatch.setenv(variable, "")
    argv = [command] + (["--worker", "http://127.0.0.1:9"] if command == "router" else [])
    with pytest.raises(SystemExit, match="is empty"):
        main(argv)
