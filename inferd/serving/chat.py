"""Submitting a chat request: render the template, pick the output grammar,
build each choice's sampling parameters once, and start the engine requests.
Every chat-shaped dialect (OpenAI, Anthropic, Responses, Ollama's /api/chat
through its own runner) converts its request to a `ChatCompletionRequest`
and shares this."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fastapi import Request

from inferd.chat.reasoning import prompt_opens_thinking
from inferd.serving.admission import admit
from inferd.serving.chat_constraints import output_grammar
from inferd.serving.chat_output import ChoiceOutput
from inferd.serving.chat_prompt import submitted_prompt, tool_choice_mode
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.serving.generation import Generation, Submission, new_id, request_priority, submit
from inferd.serving.sampling import default_max_tokens, sampling_params
from inferd.serving.state import ServerState
from inferd.serving.tokens import encode_prompt, off_loop

log = logging.getLogger(__name__)


@dataclass
class SubmittedChat:
    """A chat request running in the engine: its choices and one output parser per choice."""

    request_id: str
    generation: Generation
    outputs: list[ChoiceOutput]
    prompt_ids: list[int]
    top_logprobs: int


async def submit_chat(state: ServerState, req: ChatCompletionRequest, raw: Request,
                      id_prefix: str = "chatcmpl") -> SubmittedChat:
    engine = state.require_engine()
    state.check_model(req.model)
    if req.ignored_fields():
        log.info("chat request: ignored fields %s", req.ignored_fields())
    mode = tool_choice_mode(req)
    tool_parser_cls = state.tool_parser if mode != "none" else None

    def new_tool_parser():
        # Marker ids let forced-call grammars use the model's own marker tokens.
        return tool_parser_cls(token_id=engine.tokenizer.token_to_id) if tool_parser_cls else None

    prompt = await off_loop(submitted_prompt, state.template, req)
    prompt_ids = await encode_prompt(engine.tokenizer, prompt, engine.engine.max_model_len, param="messages")
    spec = output_grammar(req, mode, new_tool_parser())
    if spec is not None:  # a first-seen large schema can take a moment to compile
        await asyncio.to_thread(state.grammar.validate, spec)
    markers = state.think_markers
    started = markers is not None and prompt_opens_thinking(prompt, markers)

    max_tokens = default_max_tokens(req.requested_max_tokens(), state.config.default_max_tokens)
    top = req.top_logprobs or 0
    budget = req.requested_thinking_budget()
    params = []
    for i in range(req.n):
        p = sampling_params(req, max_tokens, top if req.logprobs else None, seed_offset=i,
                            defaults=state.sampling_defaults)
        p.stop += [s for s in state.template.stop if s not in p.stop]  # the template's own turn end
        p.thinking_budget = budget if budget is not None else state.config.reasoning_budget
        p.max_pattern_size, p.min_count, p.min_pattern_size = req.max_pattern_size, req.min_count, req.min_pattern_size
        params.append(p)
    constraints = [state.grammar.constraint(spec) if spec else None for _ in range(req.n)]
    await admit(state.reported_model(req.model), [prompt_ids] * req.n, params, engine.engine.max_model_len)
    request_id = new_id(id_prefix)
    submission = Submission(request_id, request_priority(raw), req.cache_prompt, req.cache_salt, started)
    generation = submit(engine, submission, [prompt_ids] * req.n, params, constraints)
    outputs = [ChoiceOutput(markers, started, new_tool_parser()) for _ in range(req.n)]
    return SubmittedChat(request_id, generation, outputs, prompt_ids, top)
