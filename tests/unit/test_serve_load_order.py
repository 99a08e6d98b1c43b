"""`inferd serve` on TCP binds its socket, then loads the weights while the app
is built (issue 16: warm start); what follows the load waits for the server to
listen, whichever ends first."""

from __future__ import annotations

import signal
import socket
import threading

import pytest

from inferd.commands import serve as serve_command
from inferd.commands.serve import _AfterLoad, run_serve
from inferd.config import ServeConfig


@pytest.fixture
def no_event_loop(monkeypatch):
    def stop_before_serving(coro):
        coro.close()

    monkeypatch.setattr(serve_command.event_loop, "run", stop_before_serving)


def test_weights_start_loading_before_the_app_is_built(tmp_path, tiny_model_dir, monkeypatch, no_event_loop):
    loading = threading.Event()
    load_arguments = []

    def load_model(*args, **kwargs):
        load_arguments.append(args)
        loading.set()
        raise RuntimeError("the test ends the load here")

    real_build_app = serve_command.build_app
    load_began_during_build = []

    def build_app(state):
        # Without the early start the load begins only once the server listens: this wait would time out.
        load_began_during_build.append(loading.wait(60))
        return real_build_app(state)

    signals = []
    monkeypatch.setattr(serve_command, "load_model", load_model)
    monkeypatch.setattr(serve_command, "build_app", build_app)
    monkeypatch.setattr(serve_command.os, "kill", lambda pid, sig: signals.append(sig))
    config = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path / "data"), port=0)
    assert run_serve(config) == 1  # the load failed and nothing served
    assert load_began_during_build == [True]
    assert load_arguments == [(config.model, config.dtype, config.device, config.weights, config.data_dir)]
    assert signals == []  # the server never listened: nothing to stop, and no signal to kill the process


@pytest.fixture
def sent_signals(monkeypatch):
    sent = []
    monkeypatch.setattr(serve_command.os, "kill", lambda pid, sig: sent.append(sig))
    return sent


def test_a_model_ready_before_the_server_listens_registers_once_it_listens(sent_signals):
    after, calls = _AfterLoad(), []
    after.ready()
    assert calls == []
    after.listening(lambda: calls.append("registered"))
    assert calls == ["registered"] and sent_signals == []


def test_a_model_ready_after_the_server_listens_registers_then(sent_signals):
    after, calls = _AfterLoad(), []
    after.listening(lambda: calls.append("registered"))
    assert calls == []
    after.ready()
    assert calls == ["registered"] and sent_signals == []


def test_without_registration_a_ready_model_needs_nothing(sent_signals):
    after = _AfterLoad()
    after.ready()
    after.listening(None)
    assert sent_signals == []


def test_a_load_that_fails_before_the_server_listens_stops_it_once_it_listens(sent_signals):
    after, calls = _AfterLoad(), []
    after.failed()
    assert sent_signals == []  # uvicorn's handler is not installed yet: SIGTERM would kill the process
    after.listening(lambda: calls.append("registered"))
    assert sent_signals == [signal.SIGTERM] and calls == []


def test_a_load_that_fails_while_serving_stops_the_server(sent_signals):
    after, calls = _AfterLoad(), []
    after.listening(lambda: calls.append("registered"))
    after.failed()
    assert sent_signals == [signal.SIGTERM] and calls == []


@pytest.mark.parametrize("host", ["no-such-host.invalid", "taken"])
def test_a_socket_that_cannot_be_bound_is_one_line_before_any_weights_load(tmp_path, tiny_model_dir, monkeypatch,
                                                                             caplog, host):
    monkeypatch.setattr(serve_command, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if host == "taken" else 0
        address = "127.0.0.1" if host == "taken" else host
        config = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path / "data"), host=address, port=port)
        assert run_serve(config) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    reason = "address already in use" if host == "taken" else "name or service not known"
    assert errors == [f"could not listen on {address}:{port} ({reason}): "
                      "stop what is using it, or pick another --host/--port"]
