"""POST /api/generate: a prompt through the chat template (with `system` before
it), or sent as it is when `raw`."""

from __future__ import annotations

from fastapi import Request

from inferd.serving.generation import check_token_ids
from inferd.api.ollama.chat import NO_IMAGES, chat_prompt
from inferd.api.ollama.models import check_model
from inferd.api.ollama.protocol import GenerateRequest, Message
from inferd.api.ollama.results import created_at
from inferd.api.ollama.run import Prompt, generate
from inferd.engine.outputs import RequestOutput
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState
from inferd.serving.tokens import encode_checked, off_loop


def _prompt(state: ServerState, req: GenerateRequest) -> Prompt:
    if req.raw:
        engine = state.require_engine()
        ids = encode_checked(engine.tokenizer, req.prompt, engine.engine.max_model_len)
        prompt = Prompt(ids=ids, text=req.prompt)
    else:
        system = [Message(role="system", content=req.system)] if req.system else []
        prompt = chat_prompt(state, [*system, Message(role="user", content=req.prompt)], None, req.think)
    if req.context:  # continue the conversation a previous answer's context holds
        prompt.ids = check_token_ids(state.engine, req.context, param="context") + prompt.ids
    return prompt


def _response(content: str, thinking: str | None, tool_calls: list[dict]) -> dict:
    return {"response": content, **({"thinking": thinking} if thinking else {})}


async def create_generate(state: ServerState, req: GenerateRequest, raw: Request):
    check_model(state, req.model)
    state.require_engine()
    if req.images:
        raise BadRequest(NO_IMAGES, param="images")
    if req.suffix:
        raise BadRequest(f'"{req.model}" does not support insert (suffix)', param="suffix")
    if req.template:
        raise BadRequest("template overrides are not supported; the model's own chat template is used "
                         "(send raw: true with a prompt already formatted to use another)", param="template")
    if not req.prompt and not req.context:  # Ollama's way to load a model: nothing to generate
        return {"model": req.model, "created_at": created_at(), "response": "", "done": True, "done_reason": "load"}
    prompt = await off_loop(_prompt, state, req)

    def context(final: RequestOutput, output_ids: list[int]) -> dict:
        return {"context": prompt.ids + output_ids}

    return await generate(state, req, prompt, raw, _response, context)
