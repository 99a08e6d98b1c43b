"""Request cards: what a generating request is doing, for `/v1/requests`.

Every `Generation` gets a card when it is submitted: trace id, key, model,
route, state, token counts, timings (queue time, until the engine first
scheduled it; time to first token; duration) and the last 64 KiB of output.
Cards of requests in flight are kept by id; finished ones move to a bounded
ring, the newest first. A card's id is unique; its trace id is the client's
x-request-id when it sent one, which clients may reuse, so a lookup by trace
id takes the newest card of that trace the caller may see. A card can stop its generation from another connection:
`cancel` ends the original answer with its dialect's error, `interrupt` ends
it normally with the output so far.

    queued --first output--> running --> done | cancelled | interrupted | disconnected | failed
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.serving.generation import Generation

OUTPUT_TAIL = 64 * 1024  # bytes of output a card shows (it keeps as many characters: never fewer bytes)
FINISHED_KEPT = 256
ENDED = ("done", "cancelled", "interrupted", "disconnected", "failed")


@dataclass
class RequestCard:
    id: str
    trace_id: str
    key: str | None
    model: str
    route: str
    state: str = "queued"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    created: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    scheduled: float | None = None  # when the engine first gave it a step (the first choice to get one)
    first_token: float | None = None
    ended: float | None = None
    output: str = ""
    error: str | None = None
    generation: Generation | None = field(default=None, repr=False)

    def saw_scheduled(self, when: float | None) -> None:
        if when is not None and (self.scheduled is None or when < self.scheduled):
            self.scheduled = when

    @property
    def queue_time(self) -> float:
        """Seconds from submission to the engine's first step for it; so far, while it waits."""
        end = self.scheduled if self.scheduled is not None else self.ended if self.ended is not None \
            else time.monotonic()
        return max(0.0, end - self.started)

    def add_output(self, text: str) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()
            self.state = "running"
        if text:
            self.output = (self.output + text)[-OUTPUT_TAIL:]

    def public(self, *, output: bool = False) -> dict:
        now = self.ended if self.ended is not None else time.monotonic()
        body = {
            "id": self.id, "object": "request", "trace_id": self.trace_id, "key": self.key, "model": self.model,
            "route": self.route, "state": self.state, "created": self.created,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                      "cached_tokens": self.cached_tokens},
            "queue_time": round(self.queue_time, 6),
            "time_to_first_token": None if self.first_token is None else round(self.first_token - self.started, 6),
            "duration": round(now - self.started, 6), "error": self.error,
        }
        if output:
            body["output"] = self.output.encode()[-OUTPUT_TAIL:].decode(errors="ignore")
        return body


class RequestCards:
    def __init__(self, kept: int = FINISHED_KEPT):
        self.in_flight: OrderedDict[str, RequestCard] = OrderedDict()
        self.finished: deque[RequestCard] = deque(maxlen=kept)

    def open(self, card: RequestCard) -> RequestCard:
        self.in_flight[card.id] = card
        return card

    def close(self, card: RequestCard, state: str) -> None:
        if card.id not in self.in_flight:
            return
        del self.in_flight[card.id]
        card.state, card.ended, card.generation = state, time.monotonic(), None
        self.finished.appendleft(card)

    def get(self, id: str) -> RequestCard | None:
        return self.in_flight.get(id) or next((c for c in self.finished if c.id == id), None)

    def find(self, id: str, visible: Callable[[RequestCard], bool] = lambda card: True) -> RequestCard | None:
        """The card with this id, else the newest card with this trace id among those `visible` allows
        (a reused x-request-id names several requests; another key's must not hide the caller's own)."""
        card = self.get(id)
        if card is not None:
            return card if visible(card) else None
        return max(self.listed(trace_id=id, visible=visible), key=lambda c: c.started, default=None)

    def listed(self, key: str | None = None, model: str | None = None, state: str | None = None,
               trace_id: str | None = None,
               visible: Callable[[RequestCard], bool] = lambda card: True) -> list[RequestCard]:
        """In flight first (oldest first), then finished (newest first)."""
        cards = [*self.in_flight.values(), *self.finished]
        return [c for c in cards if (key is None or c.key == key) and (model is None or c.model == model)
                and (state is None or c.state == state) and (trace_id is None or c.trace_id == trace_id)
                and visible(c)]
