"""`inferd router` as a real child process, for end-to-end tests.

    with RouterProcess(workers=[w1.base_url, w2.base_url], policy="round-robin") as router:
        router.openai().chat.completions.create(...)

Start-up waits until /health counts the expected workers. Ports, the log
file and stopping are `child_process.InferdProcess`'s.
"""

from __future__ import annotations

import os
import sys
import time

import httpx
from child_process import InferdProcess, ProcessStartError



class RouterStartError(ProcessStartError):
    pass


class RouterProcess(InferdProcess):
    command = "router"
    start_error = RouterStartError

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
        self.health_interval = health_interval
        self.api_key = list(api_key)
        self.worker_api_key = worker_api_key
        self.metrics = metrics
        self.extra_args = list(extra_args)
        # Start-up waits until /health counts this many routable workers (default: every static one).
        self.wait_workers = len(self.workers) if wait_workers is None else wait_workers
        super().__init__(port, startup_timeout, log_path)

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
        if "--data-dir" not in self.extra_args:  # keep the key store out of the user's home
            args += ["--data-dir", str(self.log_path.parent / f"data-{self.log_path.stem}")]
        return args + self.extra_args

    # -- clients -----------------------------------------------------------------
    def anthropic(self, **kwargs):
        import anthropic

        kwargs.setdefault("api_key", self.api_key[0] if self.api_key else "unused")
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60.0)
        return anthropic.Anthropic(base_url=self.base_url, **kwargs)

    def fleet(self) -> list[dict]:
        """GET /v1/workers."""
        headers = {"Authorization": f"Bearer {self.api_key[0]}"} if self.api_key else {}
        with self.http(timeout=5.0) as client:
            return client.get("/v1/workers", headers=headers).json()["data"]

    # -- lifecycle ---------------------------------------------------------------
    def _wait_ready(self, deadline: float) -> None:
        self.wait_routable(self.wait_workers, deadline)

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
