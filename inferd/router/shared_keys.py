"""Router replicas started with --etcd share one key set: each managed key is
a JSON record under `<prefix>` (its hash, never a secret), loaded and then
watched like the fleet. A change made on one replica (add, update, rotate,
remove) is written to etcd and reaches every replica through the watch, so a
key rotated anywhere stops working everywhere. Usage stays per replica.

On the first load, keys this replica has that etcd has not are written to
it; afterwards etcd is the record. When etcd is unreachable the keys stay as
last seen and the watcher reconnects, loading the prefix again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from inferd.discovery.etcd_watch import require_aetcd
from inferd.tenants.keyring import KeyRing
from inferd.tenants.keys import ApiKey

log = logging.getLogger(__name__)

DEFAULT_KEYS_PREFIX = "/inferd/keys/"


class SharedKeys:
    def __init__(self, ring: KeyRing, host: str, port: int, prefix: str = DEFAULT_KEYS_PREFIX, *,
                 new_client: Callable[[], object] | None = None, backoff: float = 0.5, max_backoff: float = 10.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.ring = ring
        self.prefix = prefix.rstrip("/") + "/"
        if new_client is None:
            aetcd = require_aetcd()
            new_client = lambda: aetcd.Client(host, port, timeout=5)  # noqa: E731
        self.new_client = new_client
        self.where = f"{host}:{port}"
        self.backoff, self.max_backoff, self._sleep = backoff, max_backoff, sleep
        self.loop: asyncio.AbstractEventLoop | None = None
        self._writer = None  # the connected client, for writes
        self._first_load = True
        self.synced = asyncio.Event()

    def key_of(self, name: str) -> bytes:
        return f"{self.prefix}{name}".encode()

    async def run(self) -> None:
        """Load, watch, reconnect: runs until cancelled. Changes made here are written to etcd."""
        self.loop = asyncio.get_running_loop()
        self.ring.on_change = self._changed_here
        delay = self.backoff
        while True:
            client = self.new_client()
            try:
                await client.connect()
                self._writer = client
                revision = await self.sync(client)
                delay = self.backoff
                async for event in await client.watch_prefix(self.prefix.encode(), start_revision=revision + 1):
                    self.apply(event)
                log.warning("etcd %s: the keys watch ended; reconnecting", self.where)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd down: keys stay as last seen
                log.warning("etcd %s: %s: %s; API keys stay as last seen, retrying in %.1fs",
                            self.where, type(e).__name__, e, delay)
            finally:
                self._writer = None
                try:
                    await client.close()
                except Exception as e:
                    log.debug("etcd client close: %s", e)
            await self._sleep(delay)
            delay = min(delay * 2, self.max_backoff)

    async def sync(self, client) -> int:
        result = await client.get_prefix(self.prefix.encode())
        seen = set()
        for kv in result:
            key = self._key(kv.key, kv.value)
            if key is not None:
                self.ring.apply(key.name, key)
                seen.add(key.name)
        for key in self.ring.stored():
            if key.name not in seen:
                if self._first_load:  # ours, not yet shared
                    await client.put(self.key_of(key.name), json.dumps(key.record()).encode())
                else:  # removed elsewhere while we were away
                    self.ring.apply(key.name, None)
        self._first_load = False
        self.synced.set()
        log.info("etcd %s: %d API keys under %s", self.where, len(self.ring.stored()), self.prefix)
        return result.header.revision

    def apply(self, event) -> None:
        kind = getattr(event.kind, "value", event.kind)
        name = event.kv.key.decode(errors="replace").removeprefix(self.prefix)
        if kind == "PUT":
            key = self._key(event.kv.key, event.kv.value)
            if key is not None:
                self.ring.apply(key.name, key)
        elif kind == "DELETE":
            self.ring.apply(name, None)

    def _key(self, etcd_key: bytes, value: bytes) -> ApiKey | None:
        try:
            return ApiKey.from_record(json.loads(value))
        except ValueError as e:
            log.warning("etcd %s: ignoring %s: %s", self.where, etcd_key.decode(errors="replace"), e)
            return None

    def _changed_here(self, name: str, key: ApiKey | None) -> None:
        """Called on the thread that changed the ring; the write runs on the event loop and is waited for,
        so the management route answers once the change is shared."""
        if self.loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._write(name, key), self.loop)
        try:
            future.result(timeout=10)
        except Exception as e:
            log.warning("etcd %s: could not share the change to key %r (%s); other replicas see it when it is "
                        "made again", self.where, name, e)

    async def _write(self, name: str, key: ApiKey | None) -> None:
        client = self._writer
        if client is None:
            raise ConnectionError("not connected")
        if key is None:
            await client.delete(self.key_of(name))
        else:
            await client.put(self.key_of(name), json.dumps(key.record()).encode())
