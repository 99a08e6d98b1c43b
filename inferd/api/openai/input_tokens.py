"""POST /v1/chat/completions/input_tokens: the prompt tokens a chat request
would take, counted the way generation counts them (the same template, tools
and tokenizer), without generating. The answer has the shape of the Responses
API's /v1/responses/input_tokens."""

from __future__ import annotations

from inferd.serving.chat_prompt import submitted_prompt_ids
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.serving.state import ServerState
from inferd.serving.tokens import off_loop


async def count_input_tokens(state: ServerState, req: ChatCompletionRequest) -> dict:
    engine = state.require_engine()
    state.check_model(req.model)
    ids = await off_loop(submitted_prompt_ids, state.template, engine.tokenizer, req)
    return {"object": "response.input_tokens", "input_tokens": len(ids)}
