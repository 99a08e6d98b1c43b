"""The fleet from etcd: load every worker record under the prefix, then
watch the prefix from the next revision and apply each put and delete.

Every router replica watching the same prefix converges on the same fleet.
When etcd is unreachable the fleet stays as last seen (the workers still
serve) and the watcher reconnects with a doubling backoff; on reconnecting
it loads the prefix again, so workers that left meanwhile are removed and
new ones added before the watch resumes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from inferd.discovery.record import WorkerRecord
from inferd.router.fleet import Fleet

log = logging.getLogger(__name__)

SOURCE = "etcd"


def require_aetcd():
    try:
        import aetcd
    except ImportError:
        raise ImportError("--etcd needs the etcd client: pip install 'inferd[etcd]'") from None
    return aetcd


class EtcdWatcher:
    def __init__(
        self,
        fleet: Fleet,
        host: str,
        port: int,
        prefix: str,
        *,
        new_client: Callable[[], object] | None = None,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.fleet = fleet
        self.prefix = prefix.rstrip("/") + "/"  # as worker_key writes keys
        if new_client is None:
            aetcd = require_aetcd()
            new_client = lambda: aetcd.Client(host, port, timeout=5)  # noqa: E731
        self.new_client = new_client
        self.where = f"{host}:{port}"
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        self.synced = asyncio.Event()  # set after each full load of the prefix

    async def run(self) -> None:
        """Load, watch, reconnect: runs until cancelled."""
        delay = self.backoff
        while True:
            client = self.new_client()
            try:
                await client.connect()
                revision = await self.sync(client)
                delay = self.backoff
                watch = await client.watch_prefix(self.prefix.encode(), start_revision=revision + 1)
                async for event in watch:
                    self.apply(event)
                log.warning("etcd %s: the watch ended; reconnecting", self.where)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd down or restarting: keep the fleet as last seen, retry
                log.warning("etcd %s: %s: %s; the fleet stays as last seen, retrying in %.1fs",
                            self.where, type(e).__name__, e, delay)
            finally:
                await _close(client)
            await self._sleep(delay)
            delay = min(delay * 2, self.max_backoff)

    async def sync(self, client) -> int:
        """Make the fleet's etcd workers exactly those under the prefix; the revision read."""
        result = await client.get_prefix(self.prefix.encode())
        ids = []
        for kv in result:
            record = self._record(kv.key, kv.value)
            if record is not None:
                self.fleet.upsert(record, SOURCE)
                ids.append(record.id)
        self.fleet.retain(SOURCE, ids)
        self.synced.set()
        log.info("etcd %s: %d workers under %s", self.where, len(ids), self.prefix)
        return result.header.revision

    def apply(self, event) -> None:
        kind = getattr(event.kind, "value", event.kind)
        if kind == "PUT":
            record = self._record(event.kv.key, event.kv.value)
            if record is not None:
                self.fleet.upsert(record, SOURCE)
        elif kind == "DELETE":
            worker_id = self._id(event.kv.key)
            worker = self.fleet.get(worker_id)
            if worker is not None and worker.source == SOURCE:
                self.fleet.remove(worker_id)

    def _id(self, key: bytes) -> str:
        return key.decode(errors="replace").removeprefix(self.prefix)

    def _record(self, key: bytes, value: bytes) -> WorkerRecord | None:
        try:
            record = WorkerRecord.from_json(value)
        except (ValueError, TypeError) as e:
            log.warning("etcd %s: ignoring %s: %s", self.where, key.decode(errors="replace"), e)
            return None
        # The key names the worker: a delete carries only the key.
        return dataclasses.replace(record, id=self._id(key))


async def _close(client) -> None:
    try:
        await client.close()
    except Exception as e:  # closing a channel that never opened can fail too; nothing is left to do
        log.debug("etcd client close: %s", e)
