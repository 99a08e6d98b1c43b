"""POST /v1/chat/completions: render the template, pick the output grammar,
run the choices, and answer as one JSON body or as a chunk stream with
reasoning and tool calls split out."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request

from inferd.api.generation import collect, fan_in, raise_if_failed, request_priority, submit
from inferd.api.openai.chat_constraints import output_grammar, tool_choice_mode
from inferd.api.openai.chat_output import ChoiceOutput
from inferd.api.openai.logprobs import chat_logprobs
from inferd.api.openai.protocol import (
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest, ChatCompletionResponse,
    DeltaMessage, FunctionCall, PromptTokensDetails, ResponseMessage, ToolCall, UsageInfo, new_id,
)
from inferd.chat.reasoning import prompt_opens_thinking
from inferd.chat.template import TemplateError
from inferd.engine.async_engine import RequestStream
from inferd.server.errors import BadRequest
from inferd.server.state import ServerState
from inferd.server.streaming import DONE, sse, sse_response

log = logging.getLogger(__name__)


def _template_message(message: dict) -> dict:
    if message["role"] == "developer":  # OpenAI's newer name for system instructions
        message["role"] = "system"
    for call in message.get("tool_calls") or []:
        # Templates index into arguments; OpenAI sends them as a JSON string.
        try:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{}")
        except (ValueError, TypeError):
            pass
    return message


def render_chat_prompt(state: ServerState, req: ChatCompletionRequest, tools: list | None = None) -> str:
    """The exact prompt text a chat request becomes (also served by /apply-template)."""
    messages = []
    for m in req.messages:
        if isinstance(m.content, list) and any(p.type != "text" for p in m.content):
            raise BadRequest("this model takes text only; remove the image parts from messages", param="messages")
        messages.append(_template_message(m.model_dump(exclude_none=True)))
    try:
        return state.template.render(
            messages, tools=tools if tools is not None else req.tools,
            add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
            **req.template_kwargs(),
        )
    except TemplateError as e:
        raise BadRequest(f"the chat template refused these messages: {e}", param="messages") from None


@dataclass
class SubmittedChat:
    """A chat request running in the engine: one stream and one output parser per choice."""

    request_id: str
    streams: list[RequestStream]
    outputs: list[ChoiceOutput]
    prompt_ids: list[int]
    top_logprobs: int


async def submit_chat(state: ServerState, req: ChatCompletionRequest, raw: Request,
                      id_prefix: str = "chatcmpl") -> SubmittedChat:
    """Render, constrain and submit a chat request; other dialects convert to it and share this."""
    engine = state.require_engine()
    state.check_model(req.model)
    if req.ignored_fields():
        log.info("chat request: ignored fields %s", req.ignored_fields())
    mode = tool_choice_mode(req)
    tool_parser_cls = state.tool_parser if mode != "none" else None

    def new_tool_parser():
        # Marker ids let forced-call grammars use the model's own marker tokens.
        return tool_parser_cls(token_id=engine.tokenizer.token_to_id) if tool_parser_cls else None

    prompt = render_chat_prompt(state, req, tools=req.tools if mode != "none" else [])
    prompt_ids = engine.tokenizer.encode(prompt)
    spec = output_grammar(req, mode, new_tool_parser())
    if spec is not None:  # a first-seen large schema can take a moment to compile
        await asyncio.to_thread(state.grammar.validate, spec)
    markers = state.think_markers
    started = markers is not None and prompt_opens_thinking(prompt, markers)

    max_tokens = req.requested_max_tokens() or state.config.default_max_tokens
    top = req.top_logprobs or 0
    budget = req.requested_thinking_budget()
    params = []
    for i in range(req.n):
        p = req.sampling_params(max_tokens, top if req.logprobs else None, seed_offset=i)
        p.stop += [s for s in state.template.stop if s not in p.stop]  # the template's own turn end
        p.thinking_budget = budget if budget is not None else state.config.reasoning_budget
        p.max_pattern_size, p.min_count = req.max_pattern_size, req.min_count
        params.append(p)
    constraints = [state.grammar.constraint(spec) if spec else None for _ in range(req.n)]
    request_id = new_id(id_prefix)
    streams = submit(engine, request_id, [prompt_ids] * req.n, params, request_priority(raw), req.cache_prompt,
                     constraints, started)
    outputs = [ChoiceOutput(markers, started, new_tool_parser()) for _ in range(req.n)]
    return SubmittedChat(request_id, streams, outputs, prompt_ids, top)


async def create_chat_completion(state: ServerState, req: ChatCompletionRequest, raw: Request):
    chat = await submit_chat(state, req, raw)
    request_id, streams, outputs, top = chat.request_id, chat.streams, chat.outputs, chat.top_logprobs
    if req.stream:
        return sse_response(_stream(state, req, request_id, streams, outputs, top))
    choices = await collect(streams)
    return ChatCompletionResponse(
        id=request_id,
        model=req.model or state.model_name,
        choices=[_choice(c, outputs[c.index], state.engine.tokenizer, req, top) for c in choices],
        usage=_usage([c.final for c in choices]),
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


async def _stream(state: ServerState, req: ChatCompletionRequest, request_id: str, streams, outputs,
                  top: int) -> AsyncIterator[str]:
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
    finally:
        for s in streams:
            s.close()
    if include_usage:
        yield chunk([], usage=_usage(finals))
    yield DONE
