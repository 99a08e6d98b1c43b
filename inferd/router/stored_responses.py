"""Where each stored Responses-API response lives.

A worker keeps the responses it created, so reading, deleting or cancelling
one, or continuing from it (`previous_response_id`), must reach that worker.
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

_RESPONSE_ID = re.compile(rb'"id":\s*"(resp_[A-Za-z0-9_-]+)"')
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
        """Remember the response id the answer's first bytes carry; True once found."""
        match = _RESPONSE_ID.search(data)
        if match:
            self.remember(match[1].decode(), worker.id)
        return match is not None

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
                r = await client.get(f"{worker.url}/v1/responses/{response_id}", headers=headers,
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
