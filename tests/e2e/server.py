"""`inferd serve` as a real child process, for end-to-end tests.

    with ServerProcess(model=path, parallel=4, ctx_size=256, alias=["gpt-4o-mini"]) as server:
        server.openai().chat.completions.create(...)

Port 0 asks the OS for a free port; the real one is read back from the
server's `listening on http://HOST:PORT` log line. A host ending in `.sock`
serves on a Unix socket. Everything the process prints goes to a log file
whose tail is attached to every start-up failure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

# The shared tiny-model server's settings (tests/e2e/conftest.py).
ALIAS = "gpt-4o-mini"
TINY_CTX = 256
TINY_PARALLEL = 4

_LISTENING = re.compile(r"listening on (?:http://(?P<host>[^\s:]+):(?P<port>\d+)|(?P<path>/\S+))")


class ServerStartError(RuntimeError):
    pass


class ServerProcess:
    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        parallel: int | None = None,
        ctx_size: int | None = None,
        threads: int | None = 1,
        api_key: list[str] | tuple[str, ...] = (),
        alias: list[str] | tuple[str, ...] = (),
        metrics: bool = False,
        slots: bool = True,
        max_body_size: int | None = None,
        shutdown_timeout: float | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        startup_timeout: float = 120.0,
        log_path: str | os.PathLike | None = None,
    ):
        self.model = None if model is None else str(model)
        self.host = host
        self.port = port
        self.parallel = parallel
        self.ctx_size = ctx_size
        # One torch thread by default: test servers share a few cores with each other and
        # with the test process, and oversubscribed OpenMP threads slow decoding many-fold.
        self.threads = threads
        self.api_key = list(api_key)
        self.alias = list(alias)
        self.metrics = metrics
        self.slots = slots
        self.max_body_size = max_body_size
        self.shutdown_timeout = shutdown_timeout
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="inferd-serve-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self.model_name: str | None = None  # as /health reports it, once started
        self._log = None

    # -- the command line ------------------------------------------------------
    def args(self) -> list[str]:
        args = [sys.executable, "-m", "inferd.cli", "serve", "--host", self.host, "--port", str(self.port)]
        if self.model is not None:
            args += ["--model", self.model]
        if self.parallel is not None:
            args += ["--parallel", str(self.parallel)]
        if self.ctx_size is not None:
            args += ["--ctx-size", str(self.ctx_size)]
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        for key in self.api_key:
            args += ["--api-key", key]
        for name in self.alias:
            args += ["--alias", name]
        args.append("--metrics" if self.metrics else "--no-metrics")
        args.append("--slots" if self.slots else "--no-slots")
        if self.max_body_size is not None:
            args += ["--max-body-size", str(self.max_body_size)]
        if self.shutdown_timeout is not None:
            args += ["--shutdown-timeout", str(self.shutdown_timeout)]
        if "--data-dir" not in self.extra_args:  # keep stored responses out of the user's home
            args += ["--data-dir", str(self.log_path.parent / f"data-{self.log_path.stem}")]
        return args + self.extra_args

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

    def async_openai(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return openai.AsyncOpenAI(base_url=f"{self.base_url}/v1", **kwargs)

    def health(self) -> httpx.Response:
        with self.http(timeout=5.0) as client:
            return client.get("/health")

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "ServerProcess":
        if self.proc is not None:
            raise RuntimeError("already started")
        # The child sees no INFERD_* settings from the developer's shell: only the flags above count.
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
        env["PYTHONUNBUFFERED"] = "1"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.args(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._wait_listening(deadline)
            self._wait_healthy(deadline)
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

    def _wait_healthy(self, deadline: float) -> None:
        while True:
            try:
                response = self.health()
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code == 200:
                self.model_name = response.json()["model"]
                return
            self._check_alive_before(deadline, "/health to answer 200")
            time.sleep(0.1)

    def _check_alive_before(self, deadline: float, waiting_for: str) -> None:
        code = self.proc.poll()
        if code is not None:
            raise ServerStartError(f"inferd serve exited with {code} before {waiting_for}:\n{self.log_tail()}")
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"no {waiting_for} within {self.startup_timeout:.0f}s:\n{self.log_tail()}"
            )

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
            raise ServerStartError(f"inferd serve ignored SIGTERM for {timeout:.0f}s:\n{self.log_tail()}") from None
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

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def assert_still_serving(http: httpx.Client) -> None:
    """The server answers health and a one-token completion, whatever came before."""
    health = http.get("/health")
    assert health.status_code == 200, health.text
    r = http.post("/v1/completions", json={"prompt": "ok", "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1
