"""Listings of what workers keep (files, batches, message batches, jobs),
merged across the fleet: each worker keeps its own, so the router asks every
one and answers one page, newest first, as one server would.

Order: the time each entry shows (`created_at`), newest first; entries
showing the same time keep the workers' order (by worker id), then each
worker's own. A page's cursor (`after`, Anthropic's `after_id`/`before_id`)
is an entry of one worker: that worker pages from it as it always does, and
every other is asked for what lies beyond the cursor's time
(`created_before` / `created_from`, which the worker's listing takes), so
consecutive pages neither skip nor repeat an entry. Times shown in whole
seconds (files, OpenAI batches) compare by the second; the rest by their
exact value. A worker that cannot be reached is left out of the page.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import httpx
from starlette.responses import JSONResponse, Response

from inferd.router.worker import Worker

log = logging.getLogger(__name__)

LIST_TIMEOUT = 30.0


def _seconds(value) -> float:
    """An entry's shown creation time in seconds (0 when it shows none a router can read)."""
    try:
        if isinstance(value, str):  # Anthropic's ISO time
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@dataclass(frozen=True)
class Listing:
    entry_path: str  # where one entry is read, by its id: its time is the cursor's
    whole_seconds: bool  # entries show their time in whole seconds (else exactly)
    after: str = "after"
    before: str | None = None  # Anthropic's before_id
    default_limit: int = 20
    envelope: Callable[[list, bool], dict] | None = None

    def page(self, data: list[dict], has_more: bool) -> dict:
        if self.envelope is not None:
            return self.envelope(data, has_more)
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}


def _anthropic_page(data: list[dict], has_more: bool) -> dict:
    return {"data": data, "has_more": has_more, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


LISTINGS = {
    "/v1/files": Listing("/v1/files/", whole_seconds=True, default_limit=10000),
    "/v1/batches": Listing("/v1/batches/", whole_seconds=True),
    "/v1/jobs": Listing("/v1/jobs/", whole_seconds=False),
    "/v1/messages/batches": Listing("/v1/messages/batches/", whole_seconds=False, after="after_id",
                                    before="before_id", envelope=_anthropic_page),
}
MOST_BEFORE = 1000  # entries newer than a before_id cursor asked of each other worker


@dataclass
class ListRequest:
    listing: Listing
    path: str
    query: dict[str, str]
    headers: dict[str, str]


async def merged_listing(req: ListRequest, workers: list[Worker], client: httpx.AsyncClient,
                         locate: Callable) -> Response:
    """`locate(id)`: the worker holding an entry (or None)."""
    listing, query = req.listing, dict(req.query)
    workers = sorted(workers, key=lambda w: w.id)
    if not workers:
        return JSONResponse(listing.page([], False))
    try:
        limit = int(query.get("limit", listing.default_limit))
    except ValueError:
        limit = None
    if limit is None or limit < 1:  # a worker answers this in its dialect's words
        return await _one(req, workers[0], client)
    ascending = query.get("order") == "asc"
    backwards = listing.before is not None and bool(query.get(listing.before))
    cursor = query.get(listing.before) if backwards else query.get(listing.after)
    query.pop(listing.after, None)
    if listing.before:
        query.pop(listing.before, None)
    owner, shown = None, None
    if cursor:
        owner = await locate(cursor)
        shown = await _entry_time(req, owner, cursor, client) if owner is not None else None
        if shown is None:  # no such entry for this caller: nothing follows it, as on one worker
            return JSONResponse(listing.page([], False))
    rank = {w.id: i for i, w in enumerate(workers)}
    step = 1.0 if listing.whole_seconds else 0.0

    def ask(worker: Worker) -> dict[str, str]:
        q = {**query, "limit": str(limit)}
        if owner is None:
            return q
        if worker.id == owner.id:
            q[listing.before if backwards else listing.after] = cursor
            return q
        earlier = rank[worker.id] < rank[owner.id]  # its entries of the cursor's time come before the cursor's
        newer_side = backwards or ascending  # what follows the cursor lies after it in time, not before
        if not newer_side:  # older entries: those shown before the cursor's time (or at it, after its worker)
            q["created_before"] = repr(shown if earlier else _just_past(shown, step))
        else:  # newer entries: shown after the cursor's time (or at it, before its worker)
            ties_follow = not earlier if ascending else earlier
            q["created_from"] = repr(shown if ties_follow else _just_past(shown, step))
            if backwards:
                q["limit"] = str(MOST_BEFORE)
        return q

    answers = await asyncio.gather(*(_get(client, w, req.path, ask(w), req.headers) for w in workers))
    entries: list[tuple[float, int, int, dict]] = []
    more = False  # a worker holds more than it gave
    for worker, answer in zip(workers, answers):
        if answer is None:
            continue
        if answer.status_code != 200:  # a bad limit or filter, or a key the worker refuses: its own words
            return _as_is(answer)
        body = answer.json()
        more = more or bool(body.get("has_more"))
        for pos, entry in enumerate(body.get("data", [])):
            entries.append((_seconds(entry.get("created_at")), rank[worker.id], pos, entry))
    newest_first = not ascending
    entries.sort(key=lambda e: ((-e[0] if newest_first else e[0]), e[1], e[2]))
    if backwards:  # the `limit` just before the cursor, newest first
        page = [e[3] for e in entries[-limit:]]
    else:
        page = [e[3] for e in entries[:limit]]
    return JSONResponse(listing.page(page, more or len(entries) > limit))


def _just_past(shown: float, step: float) -> float:
    """The bound that takes in entries shown at `shown`: the next second, or the next float."""
    return shown + step if step else math.nextafter(shown, math.inf)


async def _entry_time(req: ListRequest, worker: Worker, id: str, client: httpx.AsyncClient) -> float | None:
    answer = await _get(client, worker, req.listing.entry_path + id, {}, req.headers)
    if answer is None or answer.status_code != 200:
        return None
    try:
        return _seconds(answer.json()["created_at"])
    except (ValueError, KeyError, TypeError):  # not an entry's JSON
        return None


async def _get(client: httpx.AsyncClient, worker: Worker, path: str, params: dict, headers: dict
               ) -> httpx.Response | None:
    try:
        return await client.get(worker.url + path, params=params, headers=headers, timeout=LIST_TIMEOUT)
    except httpx.HTTPError as e:
        log.warning("listing %s on worker %s failed (%s); the page leaves it out", path, worker.id, e)
        return None


async def _one(req: ListRequest, worker: Worker, client: httpx.AsyncClient) -> Response:
    answer = await _get(client, worker, req.path, req.query, req.headers)
    if answer is None:
        return JSONResponse(req.listing.page([], False))
    return _as_is(answer)


def _as_is(answer: httpx.Response) -> Response:
    return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))
