"""Keeps a `KvIndex` in step with each inferd worker's `/v1/kv-events` stream.

One asyncio task per worker reads the NDJSON stream and applies every line.
Whenever a connection ends (the worker closed it, a network error, a bad
line, no line within `read_timeout`) the worker's entry is dropped and the
task reconnects after a backoff that doubles up to `max_backoff` and starts
over once a connection delivers again. A new connection starts from an
empty entry, so its snapshot replaces everything: the index only claims
what a live stream has said.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import httpx

from inferd.router.kv_index import KvEventError, KvIndex
from inferd.router.worker import Worker

log = logging.getLogger(__name__)

EVENTS_PATH = "/v1/kv-events"
CAPABILITY = "kv-events"  # what a worker advertises when it serves EVENTS_PATH


class KvStreamError(Exception):
    """The worker answered, but not with an event stream."""


class KvSubscriber:
    def __init__(
        self,
        index: KvIndex,
        client: httpx.AsyncClient,
        *,
        api_key: str | None = None,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        read_timeout: float = 15.0,  # workers ping after 5 s of silence
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.index = index
        self.client = client
        self.headers = {"accept": "application/x-ndjson"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = httpx.Timeout(10.0, read=read_timeout)
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task] = {}

    def attach(self, worker: Worker) -> Callable[[], None] | None:
        """The fleet's join hook: follow workers that stream KV events and
        hand back the stop; others get nothing."""
        if CAPABILITY not in worker.capabilities:
            return None
        self.start(worker)
        return lambda: self.stop(worker.id)

    def start(self, worker: Worker) -> None:
        """Follow `worker`'s stream until `stop`; a no-op if already following."""
        task = self._tasks.get(worker.id)
        if task is None or task.done():
            self._tasks[worker.id] = asyncio.create_task(self.follow(worker), name=f"kv-events {worker.id}")

    def stop(self, worker_id: str) -> None:
        task = self._tasks.pop(worker_id, None)
        if task is not None:
            task.cancel()
        self.index.forget(worker_id)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for worker_id in list(self._tasks):
            self.stop(worker_id)
        await asyncio.gather(*tasks, return_exceptions=True)

    def following(self) -> list[str]:
        return sorted(w for w, task in self._tasks.items() if not task.done())

    async def follow(self, worker: Worker) -> None:
        """Read, apply, reconnect: runs until cancelled."""
        delay = self.backoff
        while True:
            try:
                async with self.client.stream(
                    "GET", worker.url + EVENTS_PATH, headers=self.headers, timeout=self.timeout
                ) as response:
                    if response.status_code != 200:
                        raise KvStreamError(f"GET {EVENTS_PATH} answered HTTP {response.status_code}")
                    async for line in response.aiter_lines():
                        if line.strip():
                            self.index.apply(worker.id, json.loads(line))
                            delay = self.backoff
                log.info("worker %s: kv-events stream ended; reconnecting", worker.id)
            except (httpx.HTTPError, KvStreamError, KvEventError, json.JSONDecodeError) as exc:
                log.warning("worker %s: kv-events stream failed (%s); retrying in %.1fs", worker.id, exc, delay)
            finally:
                # A worker re-added under the same id has a task of its own by
                # now; its entry is not this task's to drop.
                if self._tasks.get(worker.id) in (None, asyncio.current_task()):
                    self.index.forget(worker.id)
            await self._sleep(delay)
            delay = min(delay * 2, self.max_backoff)
