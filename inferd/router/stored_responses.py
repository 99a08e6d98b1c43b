"""Where each stored Responses-API response, file and batch lives.

A worker keeps the responses it created, so reading, deleting or cancelling
one, or continuing from it (`previous_response_id`), must reach that worker;
so with the files, batches and message batches it keeps (`inferd.jobs`).
The router remembers the owner of every response it sees created; an id it
does not know (created through another router replica, or before a restart)
is looked up by asking the workers, which costs one GET each.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict

import httpx

from inferd.router.fleet import Fleet
from inferd.router.worker import Worker

# Ids a worker makes for what it keeps: in a created answer's "id", and a batch's output files.
_STORED_ID = re.compile(rb'"(?:id|output_file_id|error_file_id)":\s*"((?:resp_|batch_|msgbatch_|file-)[A-Za-z0-9_-]+)"')
# Where a worker answers whether it holds an id, by the id's prefix.
_LOOKUP = {"resp_": "/v1/responses/", "msgbatch_": "/v1/messages/batches/", "batch_": "/v1/batches/",
           "file-": "/v1/files/"}
LOOKUP_TIMEOUT = 5.0
DEFAULT_CAPACITY = 100_000


class ResponseOwners:
    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()

    def remember(self, response_id: str, worker_id: str) -> None:
        self._owners[response_id] = worker_id
        self._owners.move_to_end(response_id)
        while len(self._owners) > self.capacity:
            self._owners.popitem(last=False)

    def learn(self, worker: Worker, data: bytes) -> bool:
        """Remember the stored ids the answer's first bytes carry; True once one is found."""
        found = False
        for match in _STORED_ID.finditer(data):
            self.remember(match[1].decode(), worker.id)
            found = True
        return found

    def owner(self, response_id: str) -> str | None:
        return self._owners.get(response_id)

    async def locate(self, response_id: str, fleet: Fleet, client: httpx.AsyncClient,
                     headers: dict | None = None) -> Worker | None:
        """The worker holding `response_id`: remembered, else the first that has it."""
        known = fleet.get(self.owner(response_id) or "")
        if known is not None:
            return known
        workers = [w for w in fleet.workers.values() if w.routable]

        async def has_it(worker: Worker) -> bool:
            try:
                r = await client.get(f"{worker.url}{lookup_path(response_id)}", headers=headers,
                                     timeout=LOOKUP_TIMEOUT)
            except httpx.HTTPError:
                return False
            return r.status_code == 200

        found = await asyncio.gather(*(has_it(w) for w in workers))
        for worker, yes in zip(workers, found):
            if yes:
                self.remember(response_id, worker.id)
                return worker
        return None


def lookup_path(stored_id: str) -> str:
    prefix = next(p for p in _LOOKUP if stored_id.startswith(p))
    return _LOOKUP[prefix] + stored_id
