"""POST /v1/messages and /v1/messages/count_tokens: converted to a chat request,
run through the chat path, and answered as an Anthropic message."""

from __future__ import annotations

from fastapi import Request

from inferd.api.anthropic.convert import to_chat_request, to_counted_request
from inferd.api.anthropic.results import content_blocks, stop_reason, usage
from inferd.api.anthropic.protocol import (
    CountTokensRequest, CountTokensResponse, MessagesRequest, MessagesResponse, message_id,
)
from inferd.api.anthropic.stream import message_events
from inferd.serving.chat import submit_chat
from inferd.serving.chat_prompt import submitted_prompt_ids
from inferd.serving.state import ServerState
from inferd.serving.tokens import off_loop


async def create_message(state: ServerState, req: MessagesRequest, raw: Request):
    chat_req = to_chat_request(req)
    chat = await submit_chat(state, chat_req, raw, id_prefix="msg")
    chat.request_id = message_id(chat.request_id)
    model = state.reported_model(req.model)
    stops = req.stop_sequences or []
    if req.stream:
        return message_events(chat, model, stops)
    (choice,) = await chat.generation.collect(raw)
    output = chat.outputs[0]
    blocks = content_blocks(output.parse(choice.text))
    reason, sequence = stop_reason(choice.final, output.called_tools, stops)
    return MessagesResponse(id=chat.request_id, model=model, content=blocks, stop_reason=reason,
                            stop_sequence=sequence, usage=usage(choice.final))


async def count_tokens(state: ServerState, req: CountTokensRequest) -> CountTokensResponse:
    engine = state.require_engine()
    state.check_model(req.model)
    # The same prompt that /v1/messages would submit.
    ids = await off_loop(submitted_prompt_ids, state.template, engine.tokenizer, to_counted_request(req))
    return CountTokensResponse(input_tokens=len(ids))
