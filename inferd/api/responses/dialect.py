"""The OpenAI Responses dialect: numbered SSE events; stored responses live
on the worker that made them (the router pins their reads there)."""

from __future__ import annotations

from collections.abc import Mapping

from inferd.api.openai.dialect import both
from inferd.api.prompt_text import as_list, chunk, content_text, digest, message_text, system_text, tools_text
from inferd.api.responses.events import error_event
from inferd.http.dialect import Dialect, Endpoint


def _item_text(item: object) -> str:
    if not isinstance(item, Mapping) or "role" in item:
        return message_text(item)
    kind = item.get("type")
    if kind == "function_call":
        return chunk("function_call", f"{item.get('name')}({item.get('arguments')})")
    if kind == "function_call_output":
        return chunk("function_call_output", content_text(item.get("output")))
    return chunk(kind if isinstance(kind, str) else "item", digest(item))


def responses_text(body: Mapping) -> str:
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    return tools_text(body.get("tools")) + system_text(body.get("instructions")) + "".join(map(_item_text, as_list(items)))


STORED = "/responses/{response_id}"

DIALECT = Dialect(
    name="responses",
    routes="inferd.api.responses.routes",
    path_prefixes=both("/responses"),
    endpoints=(
        *(Endpoint(p, routing_text=responses_text, stores_response=True) for p in both("/responses")),
        *(Endpoint(p) for p in both("/responses/input_tokens")),
        *(Endpoint(p, methods=("GET", "DELETE")) for p in both(STORED)),
        *(Endpoint(p) for p in both(f"{STORED}/cancel")),
        *(Endpoint(p, methods=("GET",)) for p in both(f"{STORED}/input_items")),
    ),
    stream_error=error_event,
)
