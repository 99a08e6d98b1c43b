"""POST /v1/chat/completions: render the template, run the choices, answer
as one JSON body or as a chunk stream."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from fastapi import Request

from inferd.api.generation import collect, fan_in, raise_if_failed, request_priority, submit
from inferd.api.openai.logprobs import chat_logprobs
from inferd.api.openai.protocol import (
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse,
    DeltaMessage, PromptTokensDetails, ResponseMessage, UsageInfo, new_id,
)
from inferd.chat.template import TemplateError
from inferd.server.errors import BadRequest
from inferd.server.state import ServerState
from inferd.server.streaming import DONE, sse, sse_response

log = logging.getLogger(__name__)


def render_chat_prompt(state: ServerState, req: ChatCompletionRequest) -> str:
    """The exact prompt text a chat request becomes (also served by /apply-template)."""
    messages = []
    for m in req.messages:
        if isinstance(m.content, list) and any(p.type != "text" for p in m.content):
            raise BadRequest("this model takes text only; remove the image parts from messages", param="messages")
        message = m.model_dump(exclude_none=True)
        if message["role"] == "developer":  # OpenAI's newer name for system instructions
            message["role"] = "system"
        messages.append(message)
    try:
        return state.template.render(
            messages, tools=req.tools, add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
            **req.template_kwargs(),
        )
    except TemplateError as e:
        raise BadRequest(f"the chat template refused these messages: {e}", param="messages") from None


async def create_chat_completion(state: ServerState, req: ChatCompletionRequest, raw: Request):
    engine = state.require_engine()
    state.check_model(req.model)
    if req.ignored_fields():
        log.info("chat request: ignored fields %s", req.ignored_fields())
    tokenizer = engine.tokenizer
    prompt_ids = tokenizer.encode(render_chat_prompt(state, req))
    max_tokens = req.requested_max_tokens() or state.config.default_max_tokens
    top = req.top_logprobs or 0
    params = [req.sampling_params(max_tokens, top if req.logprobs else None, seed_offset=i) for i in range(req.n)]
    for p in params:  # the template's own turn end, e.g. the transcript's next "User:"
        p.stop += [s for s in state.template.stop if s not in p.stop]
    request_id = new_id("chatcmpl")
    streams = submit(engine, request_id, [prompt_ids] * req.n, params, request_priority(raw), req.cache_prompt)
    if req.stream:
        return sse_response(_stream(state, req, request_id, streams, top))
    choices = await collect(streams)
    finals = [c.final for c in choices]
    return ChatCompletionResponse(
        id=request_id,
        model=req.model or state.model_name,
        choices=[
            ChatChoice(
                index=c.index,
                message=ResponseMessage(content=c.text),
                logprobs=chat_logprobs(tokenizer, c.logprobs, top) if req.logprobs else None,
                finish_reason=c.final.finish_reason,
                stop_reason=c.final.stop_reason,
            )
            for c in choices
        ],
        usage=_usage(finals),
    )


def _usage(finals) -> UsageInfo:
    prompt = finals[0].usage.prompt_tokens
    completion = sum(f.usage.completion_tokens for f in finals)
    return UsageInfo(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=finals[0].usage.cached_tokens),
    )


async def _stream(state: ServerState, req: ChatCompletionRequest, request_id: str, streams, top: int) -> AsyncIterator[str]:
    tokenizer = state.engine.tokenizer
    created = int(time.time())
    model = req.model or state.model_name

    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    def chunk(choices, usage=None) -> str:
        # OpenAI's shape: finish_reason and logprobs present (null until set),
        # the delta carries only what changed, usage appears only when asked for.
        body = ChatCompletionChunk(id=request_id, created=created, model=model, choices=choices, usage=usage).model_dump()
        for choice in body["choices"]:
            choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
        if not include_usage:
            del body["usage"]
        return sse(body)

    for i in range(req.n):
        yield chunk([ChatChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
    finals = [None] * req.n
    try:
        async for i, out in fan_in(streams):
            raise_if_failed(out)
            logprobs = chat_logprobs(tokenizer, out.logprobs, top) if req.logprobs and out.logprobs else None
            if out.text or logprobs:
                yield chunk([ChatChunkChoice(index=i, delta=DeltaMessage(content=out.text), logprobs=logprobs)])
            if out.finished:
                finals[i] = out
                yield chunk([ChatChunkChoice(index=i, delta=DeltaMessage(), finish_reason=out.finish_reason)])
    finally:
        for s in streams:
            s.close()
    if include_usage:
        yield chunk([], usage=_usage(finals))
    yield DONE
