"""The generation both /api/chat and /api/generate run: prompt ids in, one
engine request, answered as one JSON object or as NDJSON lines.

The two routes differ only in where the text goes (`message` or `response`),
which `Shape` decides."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import StreamingResponse

from inferd.api.ollama.protocol import GenerationRequest
from inferd.api.ollama.results import StreamedCalls, created_at, final_fields, whole_calls
from inferd.serving.chat_request import loop_guard_fields
from inferd.api.ollama.sampling import max_tokens, output_grammar, sampling_params
from inferd.chat.reasoning import prompt_opens_thinking
from inferd.engine.outputs import RequestOutput
from inferd.http.errors import to_api_error
from inferd.serving.chat_output import ChoiceOutput
from inferd.serving.admission import admit
from inferd.serving.generation import Generation, Submission, new_id, request_priority, submit
from inferd.serving.state import ServerState

NDJSON = "application/x-ndjson"

# (content, thinking, tool calls) -> the answer's text fields
Shape = Callable[[str, str | None, list[dict]], dict]
# (the final output, every generated token id) -> extra fields of the last object
Tail = Callable[[RequestOutput, list[int]], dict]


@dataclass
class Prompt:
    ids: list[int]
    text: str  # what decides whether reasoning is already open
    stop: list[str] = field(default_factory=list)  # the template's turn end
    tools: bool = False  # parse tool calls out of the output


async def generate(state: ServerState, req: GenerationRequest, prompt: Prompt, raw: Request,
                   shape: Shape, tail: Tail | None = None):
    engine = state.require_engine()
    parser_cls = state.tool_parser if prompt.tools else None
    parser = parser_cls(token_id=engine.tokenizer.token_to_id) if parser_cls else None
    spec = output_grammar(req.format)
    if spec is not None:  # a first-seen large schema can take a moment to compile
        await asyncio.to_thread(state.grammar.validate, spec)
    limit = max_tokens(req.options, state.config.default_max_tokens, len(prompt.ids), engine.engine.max_model_len)
    params = sampling_params(req.options, limit, prompt.stop, state.sampling_defaults)
    params.thinking_budget = state.config.reasoning_budget
    guard = loop_guard_fields(req.options)  # Ollama has no such options: read as extra ones
    params.max_pattern_size, params.min_count = guard.get("max_pattern_size", 0), guard.get("min_count", 0)
    params.min_pattern_size = guard.get("min_pattern_size", 0)
    markers = state.think_markers
    started = markers is not None and prompt_opens_thinking(prompt.text, markers)
    constraint = state.grammar.constraint(spec) if spec else None
    await admit(state.reported_model(req.model), [prompt.ids], [params], engine.engine.max_model_len)
    submission = Submission(new_id("ollama"), request_priority(raw), reasoning_started=started)
    generation = submit(engine, submission, [prompt.ids], [params], [constraint])
    output = ChoiceOutput(markers, started, parser)
    tail = tail or (lambda final, ids: {})
    head = {"model": req.model}
    if req.stream:
        return StreamingResponse(_lines(head, generation, output, shape, tail), media_type=NDJSON)
    [choice] = await generation.collect(raw)
    message = output.parse(choice.text)
    return {**head, "created_at": created_at(),
            **shape(message.content or "", message.reasoning, whole_calls(message.tool_calls)),
            **final_fields(choice.final), **tail(choice.final, choice.token_ids)}


def _line(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"


async def _lines(head: dict, generation: Generation, output: ChoiceOutput, shape: Shape, tail: Tail) -> AsyncIterator[str]:
    calls = StreamedCalls()
    token_ids: list[int] = []

    def partial(content: str, thinking: str | None, tool_calls: list[dict]) -> str:
        return _line({**head, "created_at": created_at(), **shape(content, thinking, tool_calls), "done": False})

    try:
        async with generation:
            async for _, out in generation:
                token_ids += out.token_ids
                delta = output.feed(out.text) if out.text else None
                if delta:
                    calls.add(delta.tool_calls)
                    if delta.content or delta.reasoning:
                        yield partial(delta.content, delta.reasoning or None, [])
                if out.finished:
                    end = output.finish()
                    calls.add(end.tool_calls)
                    whole = calls.take()
                    if end.content or end.reasoning or whole:
                        yield partial(end.content, end.reasoning or None, whole)
                    yield _line({**head, "created_at": created_at(), **shape("", None, []), **final_fields(out),
                                 **tail(out, token_ids)})
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the status line is already sent: report in-band, as Ollama does
        yield _line({"error": to_api_error(exc).message})
