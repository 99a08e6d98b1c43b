"""A worker's entry in etcd: `<prefix><id>` -> `WorkerRecord` JSON, held
under a lease that the worker keeps alive.

Routers see a worker for as long as its key lives. The key goes away when
the worker deregisters (first thing on SIGTERM, before the drain, so
routers stop sending while in-flight requests finish) or, for a worker that
dies without a word, when the lease runs out `ttl` seconds later.

The lease is refreshed every ttl/3. A refresh that finds the lease gone (etcd
restarted without its data, or this process was paused past the TTL) grants
a new lease and puts the key again. An unreachable etcd is logged and
retried; it never stops the worker from serving.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import socket
from urllib.parse import urlsplit

from inferd.discovery.record import WorkerRecord, parse_etcd_address, worker_key

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'inferd[etcd]'"
STOP_SECONDS = 5.0  # longest a deregistration may hold up the drain


def require_etcd_client():
    """The aetcd module, or a SystemExit that says how to install it."""
    try:
        import aetcd
    except ImportError:
        raise SystemExit(f"inferd: --register needs the etcd client; install it with: {INSTALL_HINT}") from None
    return aetcd


def check_options(address: str, ttl: float) -> None:
    """Refuse bad --register settings before the server starts."""
    require_etcd_client()
    try:
        parse_etcd_address(address)
    except ValueError as e:
        raise SystemExit(f"inferd: --register: {e}") from None
    if not ttl > 0:
        raise SystemExit(f"inferd: --register-ttl must be positive, got {ttl}")


def default_advertise_url(sockname: tuple) -> str:
    """http://HOST:PORT of a bound TCP socket; a wildcard address is
    replaced by this machine's name, which other machines can resolve."""
    host, port = sockname[0], sockname[1]
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def worker_id_for(url: str) -> str:
    """A fleet-unique id from the advertised URL (unique by definition),
    made of key-safe characters: http://10.0.0.5:8080 -> 10.0.0.5-8080."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    raw = f"{parts.hostname}-{port}{parts.path.rstrip('/')}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", raw)


class Registration:
    """Keeps one key alive in etcd. `start()` once the worker can serve;
    `stop()` deletes the key and revokes the lease (bounded by STOP_SECONDS)."""

    def __init__(self, address: str, record: WorkerRecord, prefix: str, ttl: float):
        if ttl <= 0:
            raise ValueError(f"--register-ttl must be positive, got {ttl}")
        self.host, self.port = parse_etcd_address(address)
        self.record = record
        self.key = worker_key(prefix, record.id)
        self.ttl = max(1, math.ceil(ttl))  # etcd leases count whole seconds
        self.refresh_every = ttl / 3
        self.registered = False  # the key is known to be in etcd
        aetcd = require_etcd_client()
        # Each call gives up after a refresh period, so a hung etcd reads as unreachable.
        self._client = aetcd.Client(host=self.host, port=self.port, timeout=max(1.0, self.refresh_every))
        self._errors = (aetcd.ClientError, asyncio.TimeoutError, OSError)
        self._lease = None
        self._task: asyncio.Task | None = None
        self._failing = False
        self._stopped = False

    @property
    def where(self) -> str:
        return f"etcd://{self.host}:{self.port}"

    def start(self) -> None:
        """Register and keep the key alive; nothing once `stop()` has begun."""
        if self._task is None and not self._stopped:
            self._task = asyncio.create_task(self._keep(), name="inferd-registration")

    async def _keep(self) -> None:
        while True:
            try:
                if self._lease is None:
                    await self._register()
                elif not await self._refresh():
                    log.warning("the etcd lease of %s was lost; registering again", self.key.decode())
                    self._lease, self.registered = None, False
                    continue
                if self._failing:
                    self._failing = False
                    log.info("etcd at %s answers again", self.where)
            except self._errors as e:
                if not self._failing:  # once per outage, not once per retry
                    self._failing = True
                    log.warning("etcd at %s is unreachable (%s); retrying every %.1fs", self.where,
                                str(e) or type(e).__name__, self.refresh_every)
            await asyncio.sleep(self.refresh_every)

    async def _register(self) -> None:
        lease = await self._client.lease(self.ttl)
        self._lease = lease  # known before the put, so stop() revokes it even if the put is cancelled
        try:
            await self._client.put(self.key, self.record.to_json(), lease=lease)
        except self._errors:
            self._lease = None  # a fresh lease next time; this one simply expires
            raise
        self.registered = True
        log.info("registered in %s as %s (%s, lease %ds)", self.where, self.key.decode(), self.record.url, self.ttl)

    async def _refresh(self) -> bool:
        """False when etcd no longer knows the lease."""
        reply = await self._lease.refresh()
        return reply is not None and reply.TTL > 0

    async def stop(self) -> None:
        """Delete the key, then revoke the lease; idempotent."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        lease, self._lease = self._lease, None
        try:
            if lease is not None:
                await asyncio.wait_for(self._deregister(lease), STOP_SECONDS)
                log.info("deregistered %s from %s", self.key.decode(), self.where)
        except self._errors as e:
            log.warning("could not deregister from %s (%s); the key expires with its lease within %ds",
                        self.where, str(e) or type(e).__name__, self.ttl)
        finally:
            self.registered = False
            await self._client.close()

    async def _deregister(self, lease) -> None:
        await self._client.delete(self.key)
        await lease.revoke()
