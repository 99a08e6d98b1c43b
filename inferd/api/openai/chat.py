"""POST /v1/chat/completions: submit through the chat core, then answer as one
JSON body or as a chunk stream with reasoning and tool calls split out."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request

from inferd.api.openai.logprobs import chat_logprobs
from inferd.api.openai.protocol import (
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionResponse, DeltaMessage, PromptTokensDetails,
    ResponseMessage, UsageInfo,
)
from inferd.http.sse import DONE, ChunkFrame, sse, sse_response
from inferd.serving.chat import SubmittedChat, submit_chat
from inferd.serving.chat_output import ChoiceOutput
from inferd.serving.chat_request import ChatCompletionRequest, FunctionCall, ToolCall
from inferd.serving.state import ServerState

async def create_chat_completion(state: ServerState, req: ChatCompletionRequest, raw: Request):
    chat = await submit_chat(state, req, raw)
    if req.stream:
        return sse_response(_stream(state, req, chat))
    choices = await chat.generation.collect(raw)
    return ChatCompletionResponse(
        id=chat.request_id,
        model=state.reported_model(req.model),
        choices=[_choice(c, chat.outputs[c.index], state.engine.tokenizer, req, chat.top_logprobs) for c in choices],
        usage=_usage([c.final for c in choices]),
        system_fingerprint=state.system_fingerprint,
    )


def _choice(c, output: ChoiceOutput, tokenizer, req: ChatCompletionRequest, top: int) -> ChatChoice:
    message = output.parse(c.text)
    calls = [ToolCall(id=t.id, function=FunctionCall(name=t.name, arguments=t.arguments)) for t in message.tool_calls]
    return ChatChoice(
        index=c.index,
        message=ResponseMessage(content=message.content, reasoning_content=message.reasoning, tool_calls=calls or None),
        logprobs=chat_logprobs(tokenizer, c.logprobs, top) if req.logprobs else None,
        finish_reason="tool_calls" if calls else c.final.finish_reason,
        stop_reason=c.final.stop_reason,
    )


def _usage(finals) -> UsageInfo:
    prompt = finals[0].usage.prompt_tokens
    completion = sum(f.usage.completion_tokens for f in finals)
    return UsageInfo(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=finals[0].usage.cached_tokens),
    )


def _delta(d) -> DeltaMessage:
    calls = [
        {"index": t.index, **({"id": t.id, "type": "function"} if t.id else {}),
         "function": {**({"name": t.name} if t.name else {}), "arguments": t.arguments}}
        for t in d.tool_calls
    ]
    return DeltaMessage(content=d.content or None, reasoning_content=d.reasoning or None, tool_calls=calls or None)


async def _stream(state: ServerState, req: ChatCompletionRequest, chat: SubmittedChat) -> AsyncIterator[str]:
    request_id, outputs, top = chat.request_id, chat.outputs, chat.top_logprobs
    tokenizer = state.engine.tokenizer
    created = int(time.time())
    model = state.reported_model(req.model)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    # OpenAI's shape: finish_reason and logprobs present (null until set),
    # the delta carries only what changed, usage appears only when asked for.
    envelope = ChatCompletionChunk(id=request_id, created=created, model=model, choices=[],
                                   system_fingerprint=state.system_fingerprint).model_dump()
    if not include_usage:
        del envelope["usage"]
    frame = ChunkFrame(envelope)

    def chunk(choices: list[ChatChunkChoice]) -> str:
        dumped = [c.model_dump() for c in choices]
        for choice in dumped:
            choice["delta"] = {k: v for k, v in choice["delta"].items() if v is not None}
        return frame.event(dumped)

    for i in range(req.n):
        yield chunk([ChatChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
    finals = [None] * req.n
    async with chat.generation as generation:
        async for i, out in generation:
            logprobs = chat_logprobs(tokenizer, out.logprobs, top) if req.logprobs and out.logprobs else None
            delta = outputs[i].feed(out.text) if out.text else None
            if delta or logprobs:
                yield chunk([ChatChunkChoice(index=i, delta=_delta(delta) if delta else DeltaMessage(), logprobs=logprobs)])
            if out.finished:
                finals[i] = out
                tail = outputs[i].finish()
                if tail:
                    yield chunk([ChatChunkChoice(index=i, delta=_delta(tail))])
                reason = "tool_calls" if outputs[i].called_tools else out.finish_reason
                yield chunk([ChatChunkChoice(index=i, delta=DeltaMessage(), finish_reason=reason)])
    if include_usage:
        yield sse({**envelope, "usage": _usage(finals).model_dump()})
    yield DONE
