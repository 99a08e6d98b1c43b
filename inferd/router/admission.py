"""Admission of a forwarded request for the key that sent it, in one step
once its body is read (the router reads every body anyway, so its door takes
nothing; one round trip to shared counters): the model must be in the key's
scopes (403, nothing charged), and the lease, the request and its tokens
must fit (429). The router holds no tokenizer for most policies, so the
reservation is an estimate: the prompt's characters / 4, plus the request's
own token budget when it names one. It settles to the usage the worker reports in its answer (OpenAI,
Anthropic, Responses, Ollama and llama-server fields, streamed or whole),
read as the bytes pass. The router asks the worker to end every stream with
what it counted (an SSE comment, `http/auth.py`), so a stream that reports
no usage of its own (OpenAI's without include_usage) settles exactly too;
a stream its client left before the end settles to the count on the
worker's request cards once the worker has ended it (the cards its answer
named: a trace id can name several requests); an error answer used
nothing. Only an answer with no count anywhere (a worker that is not
inferd) is charged the estimate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from inferd.http.auth import CARD_HEADER, USAGE_COMMENT, USAGE_HEADER, refusal_error
from inferd.http.dialect import Endpoint
from inferd.http.errors import APIError
from inferd.http.request_context import TRACE_HEADER, current_request
from inferd.router.http_headers import WORKER_HEADER
from inferd.tenants.refused import Refused

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
_BUDGET_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict")
_USAGE_MARKS = (b"usage", b"eval_count", b"tokens_predicted")
MAX_LINE = 1 << 20  # a line longer than this is not looked into for usage


def budget_of(body: Mapping) -> int:
    """The output tokens a request allows itself, when it says (0 when it does not)."""
    options = body.get("options") if isinstance(body.get("options"), Mapping) else {}
    for value in [*(body.get(f) for f in _BUDGET_FIELDS), options.get("num_predict")]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def prompt_estimate(endpoint: Endpoint, body: Mapping) -> int:
    if endpoint.routing_text is None:
        return 0
    try:
        text = endpoint.routing_text(body)
    except (TypeError, ValueError, AttributeError):
        return 0
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass
class UsageMeter:
    """Reads token counts out of an answer's bytes as they pass to the client. An answer that ends
    without a count (its client left mid-stream) is settled from the worker's request card."""

    estimate: tuple[int, int] = (0, 0)  # prompt, completion: charged when nothing better is known
    seen: dict[str, int] = field(default_factory=dict)
    ask_worker: Callable[[str], Awaitable[dict[str, int] | None]] | None = None  # worker id -> its card's counts
    status: int = 0
    worker: str | None = None  # the worker that answered
    cards: list[str] = field(default_factory=list)  # the ids of the request cards the worker opened for it
    on_cards: Callable[[list[str]], None] | None = None  # told those ids as the answer starts
    _carry: bytes = b""

    def usage(self) -> tuple[int, int, int]:
        if not self.seen:
            if self.status >= 400:  # refused before anything was generated: by the worker or by the router
                return 0, 0, 0
            return self.estimate[0], self.estimate[1], 0
        return self.seen.get("prompt", 0), self.seen.get("completion", 0), self.seen.get("cached", 0)

    def feed(self, data: bytes) -> None:
        lines = (self._carry + data).split(b"\n")
        self._carry = lines.pop()
        if len(self._carry) > MAX_LINE:
            self._carry = b""
        for line in lines:
            self._read(line)

    def finish(self) -> None:
        self._read(self._carry)
        self._carry = b""

    def _read(self, line: bytes) -> None:
        if not any(mark in line for mark in _USAGE_MARKS):
            return
        line = line.strip()
        if line.startswith(b"data:"):
            line = line[5:].strip()
        comment = line.startswith(USAGE_COMMENT)  # what the worker counted, at the stream's end (http/auth.py)
        if comment:
            line = line[len(USAGE_COMMENT):]
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return
        if comment:
            obj = {"usage": obj}
        for name, value in usage_fields(obj).items():
            self.seen[name] = max(self.seen.get(name, 0), value)

    @staticmethod
    def asking(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Headers that ask the worker to end a stream with the tokens it used."""
        return [*(h for h in headers if h[0].lower() != USAGE_HEADER), (USAGE_HEADER, b"1")]

    def wrap(self, app):
        async def metered(scope, receive, send):
            async def send_counting(message):
                if message["type"] == "http.response.start":
                    self.status = message["status"]
                    headers = message.get("headers", ())
                    self.worker = next((v.decode("latin-1") for n, v in headers if n.lower() == WORKER_HEADER), None)
                    self.cards = card_ids(headers)
                    if self.cards and self.on_cards is not None:
                        self.on_cards(self.cards)
                elif message["type"] == "http.response.body":
                    self.feed(message.get("body", b""))
                    if not message.get("more_body", False):
                        self.finish()
                await send(message)

            try:
                await app(scope, receive, send_counting)
            finally:
                if not self.seen and 200 <= self.status < 400 and self.worker and self.ask_worker is not None:
                    await self._from_card()  # a stream cut short: the worker's card has the count

        return metered

    async def _from_card(self) -> None:
        try:
            counted = await self.ask_worker(self.worker)
        except Exception:  # a worker gone meanwhile: the estimate stands
            log.warning("reading worker %s's count for a request it served failed", self.worker, exc_info=True)
            return
        if counted:
            self.seen.update(counted)


def card_ids(headers) -> list[str]:
    """The request cards an answer names (`x-inferd-request-card`: ids, comma-separated)."""
    for name, value in headers:
        if name.lower() == CARD_HEADER:
            return [part for part in value.decode("latin-1").replace(" ", "").split(",") if part]
    return []


def usage_fields(obj) -> dict[str, int]:
    """prompt, completion and cached token counts in one answer object or event, as each dialect names them."""
    if not isinstance(obj, dict):
        return {}
    found: dict[str, int] = {}
    for holder in (obj, obj.get("response"), obj.get("message")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(usage, dict):
            _put(found, "prompt", usage.get("prompt_tokens", usage.get("input_tokens")))
            _put(found, "completion", usage.get("completion_tokens", usage.get("output_tokens")))
            details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
            _put(found, "cached", details.get("cached_tokens") if isinstance(details, dict) else None)
            _put(found, "cached", usage.get("cache_read_input_tokens"))
    _put(found, "prompt", obj.get("prompt_eval_count"))  # Ollama
    _put(found, "completion", obj.get("eval_count"))
    _put(found, "prompt", obj.get("tokens_evaluated"))  # llama-server
    _put(found, "completion", obj.get("tokens_predicted"))
    _put(found, "cached", obj.get("tokens_cached"))
    return found


def _put(found: dict, name: str, value) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        found[name] = max(found.get(name, 0), value)


async def admit_forward(endpoint: Endpoint, body: Mapping, model: str | None) -> UsageMeter | APIError | None:
    """A meter for the answer once admitted; an error to answer with if refused; None without keys."""
    ctx = current_request()
    if ctx is None:
        return None
    ctx.model = model or ""
    traces = ctx.services.get("traces")
    owner = ctx.key.name if ctx.key is not None else None
    if traces is not None:  # so /v1/requests through the router shows this request to its key
        traces.note(ctx.trace_id, owner)
    if ctx.ticket is None or not ctx.ticket.generating:  # no keys, or not a generating path
        return None
    prompt, budget = prompt_estimate(endpoint, body), budget_of(body)
    try:
        await ctx.tenants.admit(ctx.ticket, model or "", prompt + budget)
    except Refused as refused:
        return refusal_error(refused)

    def learned(ids: list[str]) -> None:  # the worker's own names for this request: unique, unlike its trace id
        ctx.worker_cards = ids
        if traces is not None:
            traces.note_cards(ids, owner)

    meter = UsageMeter(estimate=(prompt, budget), on_cards=learned)
    ctx.ticket.meters.append(meter.usage)
    return meter


def with_trace_id(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's trace id (the client's when it was sane, else the router's own) goes to the worker,
    which logs and echoes it."""
    ctx = current_request()
    if ctx is None:
        return headers
    return [*(h for h in headers if h[0].lower() != TRACE_HEADER), (TRACE_HEADER, ctx.trace_id.encode())]
