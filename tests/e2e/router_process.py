"""`inferd router` as a real child process, for end-to-end tests.

    with RouterProcess(workers=[w1.base_url, w2.base_url], policy="round-robin") as router:
        router.openai().chat.completions.create(...)

Port 0 asks the OS for a free port; the real one is read back from the
router's `listening on http://HOST:PORT` log line. Everything the process
prints goes to a log file whose tail is attached to every start-up failure.
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

_LISTENING = re.compile(r"listening on http://(?P<host>[^\s:]+):(?P<port>\d+)")


class RouterStartError(RuntimeError):
    pass


class RouterProcess:
    def __init__(
        self,
        workers: list[str] | tuple[str, ...] = (),
        *,
        etcd: str | None = None,
        etcd_prefix: str | None = None,
        policy: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        health_interval: float | None = 0.5,
        api_key: list[str] | tuple[str, ...] = (),
        worker_api_key: str | None = None,
        metrics: bool = True,
        extra_args: list[str] | tuple[str, ...] = (),
        wait_workers: int | None = None,
        startup_timeout: float = 60.0,
        log_path: str | os.PathLike | None = None,
    ):
        self.workers = list(workers)
        self.etcd = etcd
        self.etcd_prefix = etcd_prefix
        self.policy = policy
        self.host = host
        self.port = port
        self.health_interval = health_interval
        self.api_key = list(api_key)
        self.worker_api_key = worker_api_key
        self.metrics = metrics
        self.extra_args = list(extra_args)
        # Start-up waits until /health counts this many routable workers (default: every static one).
        self.wait_workers = len(self.workers) if wait_workers is None else wait_workers
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="inferd-router-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None
        self._log = None

    # -- the command line ------------------------------------------------------
    def args(self) -> list[str]:
        args = [sys.executable, "-m", "inferd.cli", "router", "--host", self.host, "--port", str(self.port)]
        for url in self.workers:
            args += ["--worker", url]
        if self.etcd is not None:
            args += ["--etcd", self.etcd]
        if self.etcd_prefix is not None:
            args += ["--etcd-prefix", self.etcd_prefix]
        if self.policy is not None:
            args += ["--policy", self.policy]
        if self.health_interval is not None:
            args += ["--health-interval", str(self.health_interval)]
        for key in self.api_key:
            args += ["--api-key", key]
        if self.worker_api_key is not None:
            args += ["--worker-api-key", self.worker_api_key]
        args.append("--metrics" if self.metrics else "--no-metrics")
        return args + self.extra_args

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- clients -----------------------------------------------------------------
    def http(self, **kwargs) -> httpx.Client:
        kwargs.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.base_url, **kwargs)

    def openai(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return openai.OpenAI(base_url=f"{self.base_url}/v1", **kwargs)

    def anthropic(self, **kwargs):
        import anthropic

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return anthropic.Anthropic(base_url=self.base_url, **kwargs)

    def health(self) -> httpx.Response:
        with self.http(timeout=5.0) as client:
            return client.get("/health")

    def fleet(self) -> list[dict]:
        """GET /v1/workers."""
        headers = {"Authorization": f"Bearer {self.api_key[0]}"} if self.api_key else {}
        with self.http(timeout=5.0) as client:
            return client.get("/v1/workers", headers=headers).json()["data"]

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> "RouterProcess":
        if self.proc is not None:
            raise RuntimeError("already started")
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
        env["PYTHONUNBUFFERED"] = "1"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        try:
            self._wait_listening(deadline)
            self.wait_routable(self.wait_workers, deadline)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_listening(self, deadline: float) -> None:
        while True:
            match = _LISTENING.search(self.log())
            if match:
                self.port = int(match["port"])
                return
            self._check_alive_before(deadline, "the `listening on` log line")
            time.sleep(0.05)

    def wait_routable(self, count: int, deadline: float | None = None) -> None:
        """Until /health counts `count` routable workers."""
        deadline = deadline or time.monotonic() + self.startup_timeout
        while True:
            try:
                response = self.health()
            except httpx.TransportError:
                response = None
            if response is not None and response.json().get("workers") == count:
                return
            self._check_alive_before(deadline, f"/health to count {count} workers")
            time.sleep(0.1)

    def _check_alive_before(self, deadline: float, waiting_for: str) -> None:
        code = self.proc.poll()
        if code is not None:
            raise RouterStartError(f"inferd router exited with {code} before {waiting_for}:\n{self.log_tail()}")
        if time.monotonic() > deadline:
            raise RouterStartError(f"no {waiting_for} within {self.startup_timeout:.0f}s:\n{self.log_tail()}")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then wait for the exit; SIGKILL if it does not come. The exit code."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RouterStartError(f"inferd router ignored SIGTERM for {timeout:.0f}s:\n{self.log_tail()}") from None
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

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def __enter__(self) -> "RouterProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
