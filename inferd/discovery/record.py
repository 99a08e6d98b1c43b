"""What a worker publishes about itself, and where.

A worker registered in etcd lives at `<prefix><id>` under a lease; the value
is the JSON of a `WorkerRecord`. Routers watch the prefix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

DEFAULT_PREFIX = "/inferd/workers/"
DEFAULT_ETCD_PORT = 2379


@dataclass
class WorkerRecord:
    id: str  # unique in the fleet; the key's last part
    url: str  # base URL routers forward to
    model: str | None = None
    parallel: int | None = None
    block_size: int | None = None
    capabilities: list[str] = field(default_factory=list)  # e.g. ["kv-events"]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> WorkerRecord:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("url"), str):
            raise ValueError(f"not a worker record: {raw!r}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def worker_key(prefix: str, worker_id: str) -> bytes:
    return (prefix.rstrip("/") + "/" + worker_id).encode()


def parse_etcd_address(address: str) -> tuple[str, int]:
    """`etcd://host:port`, `http://host:port` or `host:port` -> (host, port)."""
    parts = urlsplit(address if "://" in address else f"etcd://{address}")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if parts.scheme not in ("etcd", "http") or not parts.hostname or port == 0:
        raise ValueError(f"etcd address {address!r}: expected etcd://HOST:PORT")
    return parts.hostname, port or DEFAULT_ETCD_PORT
