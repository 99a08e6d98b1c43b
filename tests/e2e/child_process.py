"""An `inferd` subcommand as a real child process: its log file, start-up
waits, and stopping. `ServerProcess` and `RouterProcess` build on it.

Port 0 asks the OS for a free port; the real one is read back from the
`listening on http://HOST:PORT` log line. Everything the process prints goes
to a log file whose tail is attached to every start-up failure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

_LISTENING = re.compile(r"listening on (?:http://(?P<host>[^\s:]+):(?P<port>\d+)|(?P<path>/\S+))")


class ProcessStartError(RuntimeError):
    pass


class InferdProcess:
    command = ""  # the subcommand, for messages: "serve", "router"
    start_error: type[ProcessStartError] = ProcessStartError

    # Subclasses set `host` and `api_key` (a list) before calling __init__.
    host: str
    api_key: list[str]
    env: dict[str, str] = {}  # more environment for the child (HF_ENDPOINT, ...); set before start()

    def __init__(self, port: int, startup_timeout: float, log_path: str | os.PathLike | None):
        self.port = port
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(
            tempfile.mkstemp(prefix=f"inferd-{self.command}-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self._log = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def _wait_ready(self, deadline: float) -> None:
        """After the listening line: until the process is ready for tests."""
        raise NotImplementedError

    @property
    def is_unix(self) -> bool:
        return self.host.endswith(".sock")

    @property
    def base_url(self) -> str:
        if self.is_unix:
            return "http://localhost"  # the transport carries the socket path
        return f"http://{self.host}:{self.port}"

    # -- clients -----------------------------------------------------------------
    def http(self, **kwargs) -> httpx.Client:
        """A plain HTTP client bound to this server (Unix socket or TCP)."""
        if self.is_unix:
            kwargs.setdefault("transport", httpx.HTTPTransport(uds=self.host))
        kwargs.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.base_url, **kwargs)

    def openai(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        if self.is_unix:
            import httpx2  # the SDK's own HTTP library

            kwargs.setdefault("http_client", openai.DefaultHttpxClient(transport=httpx2.HTTPTransport(uds=self.host)))
        return openai.OpenAI(base_url=f"{self.base_url}/v1", **kwargs)

    def health(self) -> httpx.Response:
        with self.http(timeout=5.0) as client:
            return client.get("/health")

    # -- lifecycle ---------------------------------------------------------------
    def start(self):
        if self.proc is not None:
            raise RuntimeError("already started")
        # The child sees no INFERD_* settings from the developer's shell: only the flags count.
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.args(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._wait_listening(deadline)
            self._wait_ready(deadline)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_listening(self, deadline: float) -> None:
        while True:
            match = _LISTENING.search(self.log())
            if match:
                if match["port"]:
                    self.port = int(match["port"])
                return
            self._check_alive_before(deadline, "the `listening on` log line")
            time.sleep(0.05)

    def _check_alive_before(self, deadline: float, waiting_for: str) -> None:
        code = self.proc.poll()
        if code is not None:
            raise self.start_error(f"inferd {self.command} exited with {code} before {waiting_for}:\n{self.log_tail()}")
        if time.monotonic() > deadline:
            raise self.start_error(f"no {waiting_for} within {self.startup_timeout:.0f}s:\n{self.log_tail()}")

    def terminate(self) -> None:
        """Send SIGTERM and return at once."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then wait for the exit; SIGKILL if it does not come. The exit code."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.start_error(
                f"inferd {self.command} ignored SIGTERM for {timeout:.0f}s:\n{self.log_tail()}") from None
        self._close_log()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    # -- the log -------------------------------------------------------------------
    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_mark(self) -> int:
        """Where the log ends now; `log_since(mark)` is what was written after."""
        return len(self.log())

    def log_since(self, mark: int) -> str:
        return self.log()[mark:]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
