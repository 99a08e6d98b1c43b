"""Workers named on the command line: `--worker URL` or `--worker MODEL=URL`.

A static worker's id is its URL: stable across router restarts and the same
in every router replica started with the same flags.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from inferd.discovery.record import WorkerRecord


def parse_worker(entry: str) -> WorkerRecord:
    """`http://host:port` or `MODEL=http://host:port` -> a record (id = url)."""
    model, url = None, entry.strip()
    head, sep, tail = url.partition("=")
    if sep and "://" not in head:  # an '=' inside the URL's query is not a model tag
        model, url = head.strip() or None, tail.strip()
    url = url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--worker {entry!r}: expected a base URL such as http://10.0.0.5:8080, optionally MODEL=URL")
    if parts.query or parts.fragment:
        raise ValueError(f"--worker {entry!r}: a worker's base URL takes no query or fragment")
    return WorkerRecord(id=url, url=url, model=model)


def parse_workers(entries: list[str]) -> list[WorkerRecord]:
    records, seen = [], set()
    for entry in entries:
        record = parse_worker(entry)
        if record.id in seen:
            raise ValueError(f"--worker {record.url} is given twice")
        seen.add(record.id)
        records.append(record)
    return records
