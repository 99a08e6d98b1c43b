"""`inferd serve` as a real child process, for end-to-end tests.

    with ServerProcess(model=path, parallel=4, ctx_size=256, alias=["gpt-4o-mini"]) as server:
        server.openai().chat.completions.create(...)

A host ending in `.sock` serves on a Unix socket. Ports, the log file and
stopping are `child_process.InferdProcess`'s.
"""

from __future__ import annotations

import os
import sys
import time

import httpx
from child_process import InferdProcess, ProcessStartError

# The shared tiny-model server's settings (tests/e2e/conftest.py).
ALIAS = "gpt-4o-mini"
TINY_CTX = 256
TINY_PARALLEL = 4


class ServerStartError(ProcessStartError):
    pass


class ServerProcess(InferdProcess):
    command = "serve"
    start_error = ServerStartError

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
        super().__init__(port, startup_timeout, log_path)
        self.model_name: str | None = None  # as /health reports it, once started

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

    # -- clients -----------------------------------------------------------------
    def async_openai(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return openai.AsyncOpenAI(base_url=f"{self.base_url}/v1", **kwargs)

    # -- lifecycle ---------------------------------------------------------------
    def _wait_ready(self, deadline: float) -> None:
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


def assert_still_serving(http: httpx.Client) -> None:
    """The server answers health and a one-token completion, whatever came before."""
    health = http.get("/health")
    assert health.status_code == 200, health.text
    r = http.post("/v1/completions", json={"prompt": "ok", "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1
