"""Ollama's native routes: HTTP concerns only; the work is in the modules beside this.

Errors here use Ollama's envelope, {"error": "message"}, with the status code."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from inferd.api.ollama.chat import chat
from inferd.api.ollama.embed import EmbeddingsRequest, EmbedRequest, create_embed, create_embeddings
from inferd.api.ollama.generate import create_generate
from inferd.api.ollama import store_info
from inferd.api.ollama.info import running, version
from inferd.api.ollama.pull import create_pull
from inferd.api.ollama.dialect import respond
from inferd.api.ollama.protocol import ChatRequest, CopyRequest, DeleteRequest, GenerateRequest, PullRequest, ShowRequest
from inferd.http.errors import to_api_error
from inferd.serving.state import ServerState, get_state


def _flat_validation_message(exc: RequestValidationError) -> str:
    first = (exc.errors() or [{}])[0]
    if first.get("type") == "json_invalid":
        return "invalid JSON in the request body"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return f"{where}: {first.get('msg', 'invalid value')}"


class OllamaErrorRoute(APIRoute):
    """Answers errors as Ollama does, before the app's OpenAI-shaped handlers see them."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def answer(request: Request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return JSONResponse({"error": _flat_validation_message(exc)}, status_code=400)
            except Exception as exc:
                return respond(to_api_error(exc))

        return answer


router = APIRouter(prefix="/api", tags=["Ollama"], route_class=OllamaErrorRoute)

_NDJSON = {200: {"content": {"application/x-ndjson": {}}, "description": "JSON, or NDJSON lines unless stream is false"}}


@router.post("/chat", responses=_NDJSON)
async def chat_route(body: ChatRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await chat(state, body, raw)


@router.post("/generate", responses=_NDJSON)
async def generate_route(body: GenerateRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_generate(state, body, raw)


@router.get("/tags")
async def tags_route(state: ServerState = Depends(get_state)):
    return await store_info.tags(state)


@router.post("/show")
async def show_route(body: ShowRequest, state: ServerState = Depends(get_state)):
    return await store_info.show(state, body)


@router.post("/pull", responses=_NDJSON)
async def pull_route(body: PullRequest, state: ServerState = Depends(get_state)):
    return await create_pull(state, body)


@router.delete("/delete")
async def delete_route(body: DeleteRequest, state: ServerState = Depends(get_state)):
    await store_info.delete(state, body)
    return Response(status_code=200)


@router.post("/copy")
async def copy_route(body: CopyRequest, state: ServerState = Depends(get_state)):
    await store_info.copy(state, body)
    return Response(status_code=200)


@router.get("/ps")
async def ps_route(state: ServerState = Depends(get_state)):
    return running(state)


@router.get("/version")
async def version_route():
    return version()


@router.post("/embed")
async def embed_route(body: EmbedRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_embed(state, body, raw)


@router.post("/embeddings")
async def embeddings_route(body: EmbeddingsRequest, raw: Request, state: ServerState = Depends(get_state)):
    return await create_embeddings(state, body, raw)
