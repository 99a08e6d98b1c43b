"""A reused x-request-id names several requests; a card id names one. The
server finds a trace id's newest card among those the caller may see; an
answer names its cards (`x-inferd-request-card`); the router charges a
stream its client left from the cards the worker named, never from whatever
card shares its trace id, and shows a key only its own."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import httpx
import pytest

from inferd.http.errors import NotFound
from inferd.http.request_context import RequestContext, request_current
from inferd.router import request_cards
from inferd.router.admission import UsageMeter, card_ids
from inferd.router.request_cards import SHARED, TraceBook, counted_by_worker
from inferd.serving.cards import RequestCard, RequestCards
from inferd.tenants.keys import ApiKey

TRACE = "reused-trace"


def key(name: str, admin: bool = False) -> ApiKey:
    return ApiKey(name=name, secret_hash=f"hash-{name}", prefix="sk-", admin=admin)


def test_a_trace_id_finds_the_newest_card_the_caller_may_see():
    cards = RequestCards()
    older = cards.open(RequestCard("req-1", TRACE, "a", "tiny", "/v1/chat/completions", started=1.0))
    newer = cards.open(RequestCard("req-2", TRACE, "b", "tiny", "/v1/chat/completions", started=2.0))
    cards.close(older, "done")  # one finished, one in flight: both are searched
    mine = lambda card: card.key == "a"  # noqa: E731
    assert cards.find(TRACE) is newer
    assert cards.find(TRACE, mine) is older  # another key's newer card does not hide the caller's own
    assert cards.find("req-2") is newer and cards.find("req-2", mine) is None
    assert cards.find("no-such") is None
    assert [c.id for c in cards.listed(trace_id=TRACE, visible=mine)] == ["req-1"]


def test_the_router_knows_a_card_by_its_id_and_a_shared_trace_id_by_no_key():
    book = TraceBook()
    book.note(TRACE, "a")
    assert book.owner({"id": "req-1", "trace_id": TRACE}) == (True, "a")
    book.note(TRACE, "a")
    assert book.owner({"id": "req-1", "trace_id": TRACE}) == (True, "a")
    book.note(TRACE, "b")  # a second key reuses it: the trace id alone no longer says whose a card is
    assert book.owner({"id": "req-1", "trace_id": TRACE}) == (True, SHARED)
    book.note_cards(["req-1"], "a")
    book.note_cards(["req-2"], "b")
    assert book.owner({"id": "req-1", "trace_id": TRACE}) == (True, "a")
    assert book.owner({"id": "req-2", "trace_id": TRACE}) == (True, "b")
    assert book.owner({"id": "req-9", "trace_id": "never-forwarded"}) == (False, None)


def test_remembered_cards_are_bounded():
    book = TraceBook(size=2)
    book.note_cards(["c1", "c2", "c3"], "a")
    assert [book.owner({"id": c, "trace_id": ""})[0] for c in ("c1", "c2", "c3")] == [False, True, True]


def test_the_meter_learns_the_cards_the_answer_names():
    learned = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"x-inferd-worker", b"w1"), (b"x-inferd-request-card", b"req-1, req-2")]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def sink(message):
        pass

    meter = UsageMeter(on_cards=learned.append)
    asyncio.run(meter.wrap(app)({"type": "http"}, None, sink))
    assert meter.cards == ["req-1", "req-2"] and learned == [["req-1", "req-2"]]
    assert card_ids([(b"x-other", b"1")]) == []


@dataclass
class FakeWorker:
    id: str
    url: str
    routable: bool = True


@dataclass
class FakeFleet:
    workers: dict[str, FakeWorker] = field(default_factory=dict)

    def get(self, worker_id):
        return self.workers.get(worker_id)

    def routable(self):
        return list(self.workers.values())


def worker_answering(cards_by_worker: dict[str, list[dict]]):
    """An httpx transport that answers `/v1/requests` as servers do: by card id, else a trace id's newest."""

    def handle(request: httpx.Request) -> httpx.Response:
        cards = cards_by_worker[request.url.host]
        path = request.url.path
        if path == "/v1/requests":
            trace = request.url.params.get("trace_id")
            return httpx.Response(200, json={"data": [c for c in cards if trace in (None, c["trace_id"])]})
        wanted = path.rsplit("/", 1)[1]
        found = [c for c in cards if c["id"] == wanted] or \
            sorted((c for c in cards if c["trace_id"] == wanted), key=lambda c: -c["created"])
        return httpx.Response(200, json=found[0]) if found else httpx.Response(404, json={})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def card(id: str, created: float, completion: int, state: str = "done") -> dict:
    return {"id": id, "trace_id": TRACE, "state": state, "created": created, "output": id,
            "usage": {"prompt_tokens": 5, "completion_tokens": completion, "cached_tokens": 0}}


@dataclass
class FakeRouter:
    fleet: FakeFleet
    client: httpx.AsyncClient
    traces: TraceBook = field(default_factory=TraceBook)
    worker_headers: dict = field(default_factory=dict)


def router_over(cards_by_worker: dict[str, list[dict]]) -> FakeRouter:
    fleet = FakeFleet({host: FakeWorker(host, f"http://{host}") for host in cards_by_worker})
    return FakeRouter(fleet, worker_answering(cards_by_worker))


def test_a_left_stream_is_charged_from_its_own_card_not_another_with_its_trace_id():
    # The client left its stream (req-mine); a newer request reusing its trace id (req-other) has ended
    # since: by trace id the worker would answer with req-other's 90 tokens.
    state = router_over({"w1": [card("req-mine", 1.0, 7), card("req-other", 2.0, 90)]})

    async def settle(worker_cards: list[str]):
        ctx = RequestContext(trace_id=TRACE, path="/v1/chat/completions", worker_cards=worker_cards)
        with request_current(ctx):
            return await counted_by_worker(state, "w1", TRACE)

    assert asyncio.run(settle(["req-mine"])) == {"prompt": 5, "completion": 7, "cached": 0}
    assert asyncio.run(settle([])) is None  # the answer named no card: the estimate stands, nothing guessed


def test_a_request_with_two_cards_is_charged_for_both():
    state = router_over({"w1": [card("req-1", 1.0, 7), card("req-2", 1.0, 3)]})

    async def settle():
        with request_current(RequestContext(trace_id=TRACE, path="/v1/chat/completions",
                                            worker_cards=["req-1", "req-2"])):
            return await counted_by_worker(state, "w1", TRACE)

    assert asyncio.run(settle()) == {"prompt": 10, "completion": 10, "cached": 0}


def looked_up(state: FakeRouter, id: str, caller: ApiKey | None) -> dict:
    async def go():
        with request_current(RequestContext(trace_id="lookup", path=f"/v1/requests/{id}", key=caller)):
            return await request_cards.get_request(id, state)

    return asyncio.run(go())


def test_through_the_router_a_reused_trace_id_finds_the_callers_own_newest_card():
    # Keys a and b both sent TRACE; b's request is the newest, on another worker.
    state = router_over({"w1": [card("req-a-old", 1.0, 1), card("req-a-new", 2.0, 2)],
                         "w2": [card("req-b", 3.0, 3)]})
    state.traces.note(TRACE, "a")
    state.traces.note(TRACE, "b")
    state.traces.note_cards(["req-a-old"], "a")
    state.traces.note_cards(["req-a-new"], "a")
    state.traces.note_cards(["req-b"], "b")
    found = looked_up(state, TRACE, key("a"))
    assert (found["id"], found["worker"], found["key"], found["output"]) == ("req-a-new", "w1", "a", "req-a-new")
    assert looked_up(state, TRACE, key("b"))["id"] == "req-b"
    assert looked_up(state, TRACE, key("root", admin=True))["id"] == "req-b"  # an admin sees the newest of all
    assert looked_up(state, "req-a-old", key("a"))["id"] == "req-a-old"  # by card id: exactly that one
    with pytest.raises(NotFound):
        looked_up(state, "req-a-old", key("b"))


def test_a_card_known_only_by_a_shared_trace_id_is_shown_to_admins_alone():
    state = router_over({"w1": [card("req-unnamed", 1.0, 1, state="running")]})  # its answer has not started
    state.traces.note(TRACE, "a")
    state.traces.note(TRACE, "b")
    with pytest.raises(NotFound):
        looked_up(state, TRACE, key("a"))
    shown = looked_up(state, TRACE, key("root", admin=True))
    assert shown["id"] == "req-unnamed" and shown["key"] is None
    listed = json.dumps(asyncio.run(_listed(state, key("a"))))
    assert "req-unnamed" not in listed


async def _listed(state: FakeRouter, caller: ApiKey):
    class Query:
        query_params: dict = {}

    with request_current(RequestContext(trace_id="list", path="/v1/requests", key=caller)):
        return await request_cards.list_requests(Query(), state)
