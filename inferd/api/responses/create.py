"""POST /v1/responses and /v1/responses/input_tokens: the request becomes a
chat request (after any stored conversation it chains onto), runs through the
chat path, and is answered as a Response object, stored when asked to."""

from __future__ import annotations

import time

from fastapi import Request

from inferd.api.responses import background, stored
from inferd.api.responses.convert import input_messages, is_incomplete, output_items, to_chat_request, usage
from inferd.api.responses.protocol import InputTokensResponse, ResponseObject, ResponsesRequest, new_item_id
from inferd.api.responses.stream import response_events
from inferd.jobs.runner import RESPONSE_ID
from inferd.serving.chat import submit_chat
from inferd.serving.chat_prompt import submitted_prompt_ids
from inferd.serving.state import ServerState
from inferd.serving.tokens import off_loop


def response_object(req: ResponsesRequest, id: str, created_at: int, model: str, status: str,
                    output: list[dict], usage=None) -> ResponseObject:
    """The Response object, echoing the request's settings as OpenAI does."""
    fields = {
        "id": id, "created_at": created_at, "status": status, "model": model, "output": output, "usage": usage,
        "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id, "store": req.store,
        "temperature": req.temperature, "top_p": req.top_p, "user": req.user, "metadata": req.metadata or {},
        "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "reasoning": {"effort": req.reasoning.effort if req.reasoning else None,
                      "summary": req.reasoning.summary if req.reasoning else None},
    }
    if req.text is not None and req.text.format is not None:
        fields["text"] = {"format": req.text.format.model_dump(by_alias=True, exclude_none=True)}
    if status == "incomplete":
        fields["incomplete_details"] = {"reason": "max_output_tokens"}
    return ResponseObject(**fields)


async def create_response(state: ServerState, req: ResponsesRequest, raw: Request):
    if req.background:
        background.check(req)
        state.check_model(req.model)
        response_id = new_item_id("resp")
        queued = response_object(req, response_id, int(time.time()), req.model or state.model_name, "queued", [])
        return await background.queue(state, req, raw, response_id, queued.model_dump())
    conversation = await stored.chain_messages(state, req.previous_response_id) + input_messages(req)
    chat = await submit_chat(state, to_chat_request(req, conversation), raw, id_prefix="resp")
    # A background response runs under the id it was queued with (`api/responses/background.py`).
    response_id = raw.scope.get(RESPONSE_ID) or "resp_" + chat.request_id.partition("-")[2]
    model = state.reported_model(req.model)
    created_at = int(time.time())  # one creation time for every event of a stream
    request = req.model_dump(by_alias=True, exclude_none=True)

    async def finish(response: ResponseObject) -> None:
        if req.store:
            await stored.save(state, request, response.model_dump(), conversation)

    def build(status: str, output: list[dict], use=None) -> ResponseObject:
        return response_object(req, response_id, created_at, model, status, output, use)

    if req.stream:
        return response_events(chat, build, finish)
    (choice,) = await chat.generation.collect(raw)
    output = chat.outputs[0]
    message = output.parse(choice.text)
    incomplete = is_incomplete(choice.final, output.called_tools)
    response = build("incomplete" if incomplete else "completed", output_items(message, incomplete),
                     usage(choice.final))
    await finish(response)
    return response


async def count_input_tokens(state: ServerState, req: ResponsesRequest) -> InputTokensResponse:
    engine = state.require_engine()
    state.check_model(req.model)
    conversation = await stored.chain_messages(state, req.previous_response_id) + input_messages(req)
    # The same prompt that POST /v1/responses would submit.
    ids = await off_loop(submitted_prompt_ids, state.template, engine.tokenizer, to_chat_request(req, conversation))
    return InputTokensResponse(input_tokens=len(ids))
