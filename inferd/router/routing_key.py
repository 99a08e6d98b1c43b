"""A request's routing key: its prompt as text (for locality) and, where
known, as token ids (for precise routing), read from any dialect's body by
that dialect's own `Endpoint.routing_text` (see `api.prompt_text`).

Nothing is validated here (the worker does that): a body this cannot read
yields "" and is routed by load alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from inferd.api.prompt_text import prompt_tokens
from inferd.api.registry import endpoints
from inferd.http.dialect import Endpoint
from inferd.router.policies.base import RoutingRequest

Tokenize = Callable[[str, Mapping], list[int] | None]

_ENDPOINTS = endpoints()


def endpoint_for(path: str) -> Endpoint | None:
    return _ENDPOINTS.get(path.split("?", 1)[0].rstrip("/"))


def routing_request(
    path: str, body: Mapping, headers: Mapping[str, str], tokenize: Tokenize | None = None
) -> RoutingRequest:
    """`tokenize(path, body)` gives the rendered prompt's token ids when the
    router has the model's tokenizer, or None; it should not raise."""
    body = body if isinstance(body, Mapping) else {}
    endpoint = endpoint_for(path)
    token_ids = tokenize(path, body) if tokenize is not None else None
    if token_ids is None and endpoint is not None and endpoint.token_prompt:
        token_ids = prompt_tokens(body.get("prompt"))
    return RoutingRequest(
        path=path,
        body=body,
        text=endpoint.routing_text(body) if endpoint is not None and endpoint.routing_text else "",
        headers={k.lower(): v for k, v in headers.items()},
        token_ids=token_ids,
    )
