"""POST /completion (and the generation half of /infill): one engine request
per prompt, answered as one JSON object (a list for several prompts) or as
server-sent `data: {...}` chunks ending with the `stop: true` summary."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator

from fastapi import Request

from inferd.api.llamacpp.probabilities import completion_probabilities
from inferd.api.llamacpp.prompts import split_prompts, tokenize_prompt
from inferd.api.llamacpp.protocol import CompletionRequest, GenerationFields
from inferd.api.llamacpp.results import final_fields, visible_tokens
from inferd.api.llamacpp.sampling import (
    generation_settings,
    in_llama_terms,
    llama_words,
    sampling_params,
)
from inferd.engine.outputs import RequestOutput, TokenLogprobs
from inferd.engine.sampling_params import SamplingParams
from inferd.http.errors import ContextSizeExceeded
from inferd.http.sse import sse, sse_response
from inferd.serving.admission import admit
from inferd.serving.generation import (
    Choice,
    Generation,
    Submission,
    new_id,
    request_priority,
    submit,
)
from inferd.serving.state import ServerState
from inferd.serving.tokens import check_fits, off_loop

log = logging.getLogger(__name__)


async def create_completion(state: ServerState, req: CompletionRequest, raw: Request):
    engine = state.require_engine()
    split = split_prompts(req.prompt)
    for p in split:
        check_fits(engine.tokenizer, "".join(x for x in ([p] if isinstance(p, str) else p) if isinstance(x, str)),
                   engine.engine.max_model_len)
    prompts = await off_loop(lambda: [tokenize_prompt(engine.tokenizer, p) for p in split])
    return await run_completion(state, req, prompts, raw)


async def run_completion(state: ServerState, req: GenerationFields, prompts: list[list[int]], raw: Request):
    engine = state.require_engine()
    if req.ignored_fields():
        log.info("llama.cpp completion request: ignored fields %s", req.ignored_fields())
    params = sampling_params(req, engine.tokenizer, state.config.default_max_tokens, state.sampling_defaults)
    budget = req.requested_thinking_budget()
    params.thinking_budget = budget if budget is not None else state.config.reasoning_budget
    params.max_pattern_size, params.min_count = req.max_pattern_size, req.min_count
    params.min_pattern_size = req.min_pattern_size
    priority = request_priority(raw)
    spec = req.grammar_spec()
    if spec is not None:  # a first-seen large schema can take a moment to compile
        await asyncio.to_thread(state.grammar.validate, spec)
    constraints = [state.grammar.constraint(spec) if spec else None for _ in prompts]
    await admit(state.model_name, prompts, [params] * len(prompts), engine.engine.max_model_len)
    try:
        submission = Submission(new_id("cmpl"), priority, req.cache_prompt, req.cache_salt)
        generation = submit(engine, submission, prompts, [dataclasses.replace(params) for _ in prompts], constraints)
    except ValueError as e:
        raise in_llama_terms(e) from None
    except ContextSizeExceeded as e:
        e.message = llama_words(e.message)
        raise
    answer = _Answer(state, req, params, prompts)
    if req.stream:
        return sse_response(answer.stream(generation))
    bodies = [only_fields(answer.body(choice), getattr(req, "response_fields", None))
              for choice in await generation.collect(raw)]
    return bodies[0] if len(bodies) == 1 else bodies


def only_fields(body: dict, fields: list[str] | None) -> dict:
    """llama-server's response_fields: just those fields, each under its own
    path ("generation_settings/n_predict" reaches into an object); missing ones are left out."""
    if not fields:
        return body
    picked = {}
    for path in fields:
        value, found = body, True
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                found = False
                break
            value = value[key]
        if found:
            picked[path] = value
    return picked


@dataclasses.dataclass
class _Answer:
    """Builds the JSON of one request's completions."""

    state: ServerState
    req: GenerationFields
    params: SamplingParams
    prompts: list[list[int]]

    def __post_init__(self) -> None:
        self.tokenizer = self.state.engine.tokenizer
        self.settings = generation_settings(self.req, self.params)

    def _probabilities(self, logprobs: list[TokenLogprobs] | None, count: int) -> dict:
        """Entries for the first `count` tokens (those the answer shows)."""
        if not self.req.n_probs or not logprobs:
            return {}
        post = getattr(self.req, "post_sampling_probs", False)
        return {"completion_probabilities": completion_probabilities(self.tokenizer, logprobs[:count], post)}

    def _summary(self, index: int, final: RequestOutput, content: str, tokens: list[int], has_new_line: bool) -> dict:
        return {
            "index": index,
            "content": content,
            "tokens": tokens,
            "stop": True,
            "model": self.state.model_name,
            "generation_settings": self.settings,
            "prompt": self.tokenizer.decode(self.prompts[index], skip_special_tokens=False),
            "has_new_line": has_new_line,
            **final_fields(final, self.params.max_tokens),
        }

    def body(self, choice: Choice) -> dict:
        tokens = visible_tokens(choice.token_ids, choice.final)
        body = self._summary(choice.index, choice.final, choice.text, tokens if self.req.return_tokens else [],
                             has_new_line="\n" in choice.text)
        return body | self._probabilities(choice.logprobs, len(tokens))

    async def stream(self, generation: Generation) -> AsyncIterator[str]:
        predicted = [0] * len(generation)
        seen_new_line = [False] * len(generation)
        async with generation:
            async for i, out in generation:
                predicted[i] += len(out.token_ids)
                seen_new_line[i] = seen_new_line[i] or "\n" in out.text
                tokens = visible_tokens(out.token_ids, out)
                if out.text or tokens:
                    yield sse({
                        "index": i, "content": out.text, "tokens": tokens, "stop": False,
                        "tokens_predicted": predicted[i], "tokens_evaluated": len(self.prompts[i]),
                    } | self._probabilities(out.logprobs, len(tokens)))
                if out.finished:
                    # The text already went out in the partial chunks, as llama-server streams it.
                    yield sse(self._summary(i, out, "", [], has_new_line=seen_new_line[i]))
