"""The door to the models loaded on demand (`serving.model_host`): a request
whose body names one of them waits for it to load, holds it for as long as it
runs, and reaches the routes with that model chosen (a chat model by
`serving.state.choose_model`, an embedding or rerank model by
`serving.served_models.choose_leased`), so every dialect serves it unchanged.
Requests for the server's own models, or naming no model, pass straight
through; a model that cannot do what the path asks is a 400 before it loads.
Batch and background items come through here too (`server.job_dispatch`).

Ollama's `keep_alive` is read here too, and its way to unload a model:
/api/generate or /api/chat with nothing to run and `keep_alive: 0`; the
server's own chat model too (`server.own_model`), after which it is loaded
on demand like the others."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache

from starlette.responses import JSONResponse

from inferd.api.ollama.results import created_at
from inferd.api.registry import endpoints
from inferd.http.errors import APIError, BadRequest
from inferd.server.own_model import check_unloadable, means_own, unload_own_when_idle
from inferd.serving.keep_alive import parse_keep_alive
from inferd.serving.model_host import HostedModel
from inferd.serving.served_models import CHAT, EMBED, RERANK, choose_leased
from inferd.serving.state import ServerState, choose_model

# Client POST paths that do not run the chat model: they never load one.
_NOT_CHAT = ("embed", "rerank", "audio", "files", "batches", "cancel", "/api/show", "{")
_POOLED = ("embed", "rerank")  # paths that run an embedding or rerank model
_OLLAMA_LOADS = {"/api/generate": "prompt", "/api/chat": "messages"}
_IS = {CHAT: "a chat model", EMBED: "an embedding model", RERANK: "a reranker (cross-encoder)"}


@cache
def chat_paths() -> frozenset[str]:
    return frozenset(p for p, e in endpoints().items()
                     if "POST" in e.methods and not any(mark in p for mark in _NOT_CHAT))


@cache
def pooled_paths() -> frozenset[str]:
    return frozenset(p for p, e in endpoints().items()
                     if "POST" in e.methods and any(mark in p for mark in _POOLED) and "{" not in p)


@cache
def selected_paths() -> frozenset[str]:
    """The paths whose body's `model` may name a model loaded on demand."""
    return chat_paths() | pooled_paths()


def _task(path: str) -> str:
    return CHAT if path in chat_paths() else EMBED if "embed" in path else RERANK


def _fits(model: HostedModel, task: str) -> bool:
    """The model can do `task` (reranking takes an embedding model too: cosine scores)."""
    return model.kind == task or (task == RERANK and model.kind == EMBED)


class ModelSelect:
    def __init__(self, app, state: Callable[[], ServerState], respond: Callable[[str, APIError], object]):
        self.app, self.state, self.respond = app, state, respond

    async def __call__(self, scope, receive, send):
        state = self.state()
        path = scope.get("path", "")
        if (scope["type"] != "http" or state.host is None or scope.get("method") != "POST"
                or path not in selected_paths() or _is_multipart(scope)):
            return await self.app(scope, receive, send)
        messages, body = await _read_body(receive)
        replay = _replayer(messages, receive)
        data = _json_object(body)
        name = data.get("model") if data is not None else None
        host = state.host
        model = None
        if isinstance(name, str) and name not in _own_names(state, path):
            await host.sync()  # a model pulled since the server started is served too
            model = host.find(name)
        if model is None and host.own is not None and path in chat_paths():
            if not means_own(state, name):  # served nowhere here: the 404 naming every model, before any route
                return await self.respond(path, _not_served(state, name))(scope, replay, send)
            model = host.own  # the server's own model, unloaded by a keep_alive 0: it loads on demand now
        if model is None:
            if path in chat_paths() and state.engine is not None and means_own(state, name):
                return await self._own(state, path, data or {}, name, scope, replay, send)
            return await self.app(scope, replay, send)
        if not _fits(model, _task(path)):
            able = ", ".join(repr(n) for n in _able(state, _task(path))) or "none is served here"
            error = BadRequest(f"model {name!r} is {_IS[model.kind]}: {path} needs {_IS[_task(path)]} ({able})",
                               param="model", code="model_not_supported")
            return await self.respond(path, error)(scope, replay, send)
        try:
            keep_alive = _keep_alive(data) if path.startswith("/api/") else "default"
        except ValueError as error:
            return await self.respond(path, BadRequest(str(error), param="keep_alive"))(scope, replay, send)
        if path in _OLLAMA_LOADS and keep_alive == 0 and not data.get(_OLLAMA_LOADS[path]):
            model.keep_alive = 0  # gone now when idle, else once its last request ends
            await host.unload(model, "requested")
            return await JSONResponse(_unloaded(name, path))(scope, replay, send)
        try:
            parts = await host.acquire(model, keep_alive)
        except APIError as error:
            return await self.respond(path, error)(scope, replay, send)
        if model.kind == CHAT:
            choose_model(state, parts)
        else:
            choose_leased(parts.served)
        released = False

        async def send_then_release(message):
            nonlocal released
            if message["type"] == "http.response.body" and not message.get("more_body") and not released:
                released = True  # before the last byte: a client that then asks /api/ps sees the unload
                await host.release(model)
            await send(message)

        try:
            await self.app(scope, replay, send_then_release)
        finally:
            if not released:
                await host.release(model)


    async def _own(self, state: ServerState, path: str, data: dict, name, scope, replay, send):
        """A request on the server's own chat model, loaded at start: counted while it runs, so that
        Ollama's keep_alive 0 (alone, or with this request) unloads the model only once none runs on it."""
        host = state.host
        try:
            keep_alive = _keep_alive(data) if path.startswith("/api/") else "default"
            if keep_alive == 0:
                check_unloadable(state)
        except ValueError as error:
            return await self.respond(path, BadRequest(str(error), param="keep_alive"))(scope, replay, send)
        except APIError as error:
            return await self.respond(path, error)(scope, replay, send)
        if path in _OLLAMA_LOADS and keep_alive == 0 and not data.get(_OLLAMA_LOADS[path]):
            await unload_own_when_idle(state, host)
            return await JSONResponse(_unloaded(name, path))(scope, replay, send)
        host.own_requests += 1
        host.own_unload_wanted |= keep_alive == 0
        released = False

        async def release():
            nonlocal released
            released = True
            host.own_requests -= 1
            host.own_request_ended(keep_alive)
            if host.own_unload_wanted and host.own_requests == 0:
                await unload_own_when_idle(state, host)

        async def send_then_release(message):
            if message["type"] == "http.response.body" and not message.get("more_body") and not released:
                await release()  # before the last byte, as for the models loaded on demand
            await send(message)

        try:
            await self.app(scope, replay, send_then_release)
        finally:
            if not released:
                await release()


def _not_served(state: ServerState, name: str) -> APIError:
    try:
        state.check_model(name)
    except APIError as error:
        return error
    return BadRequest(f"model {name!r} cannot generate text here", param="model", code="model_not_supported")


def _unloaded(name, path: str) -> dict:
    """Ollama's answer to a keep_alive 0 with nothing to run."""
    answer = {"model": name, "created_at": created_at(), "done": True, "done_reason": "unload"}
    answer.update({"response": ""} if path == "/api/generate" else {"message": {"role": "assistant", "content": ""}})
    return answer


def _able(state: ServerState, task: str) -> list[str]:
    tasks = (RERANK, EMBED) if task == RERANK else (task,)
    own = state.served_names[:1] if task == CHAT and state.engine is not None else \
        [m.name for m in state.served.able(*tasks)]
    return own + [m.name for m in state.host.models if _fits(m, task)]


def _own_names(state: ServerState, path: str) -> list[str]:
    """The names of the models this server loaded at start for what `path` does (and holds still)."""
    if path in chat_paths():
        names = state.served_names if state.host.own is None else []
    else:
        names = [n for m in state.served.models for n in m.names]
    return names + [f"{n}:latest" for n in names]


def _keep_alive(data: dict):
    if data.get("keep_alive") is None:
        return "default"
    return parse_keep_alive(data["keep_alive"])


def _is_multipart(scope) -> bool:
    for key, value in scope.get("headers", ()):
        if key == b"content-type":
            return value.lower().startswith(b"multipart/")
    return False


async def _read_body(receive) -> tuple[list[dict], bytes]:
    messages, parts = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return messages, b"".join(parts)


def _replayer(messages: list[dict], receive):
    async def replay():
        return messages.pop(0) if messages else await receive()
    return replay


def _json_object(body: bytes) -> dict | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's limit
        return None  # the route answers a bad body in its own words
    return data if isinstance(data, dict) else None
