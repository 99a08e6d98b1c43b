"""POST /v1/completions: prompts as text or token ids, n choices each."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from fastapi import Request

from inferd.api.openai.logprobs import completion_logprobs
from inferd.api.openai.protocol import CompletionChoice, CompletionRequest, CompletionResponse, PromptTokensDetails, UsageInfo
from inferd.http.errors import BadRequest
from inferd.http.sse import DONE, ChunkFrame, sse, sse_response
from inferd.serving.admission import admit
from inferd.serving.generation import Generation, Submission, check_token_ids, new_id, request_priority, submit
from inferd.serving.sampling import LEGACY_COMPLETIONS_MAX_TOKENS, default_max_tokens, sampling_params
from inferd.serving.state import ServerState
from inferd.serving.tokens import encode_prompt

log = logging.getLogger(__name__)


async def create_completion(state: ServerState, req: CompletionRequest, raw: Request):
    engine = state.require_engine()
    state.check_model(req.model)
    if req.ignored_fields():
        log.info("completion request: ignored fields %s", req.ignored_fields())
    if req.echo and req.logprobs is not None:
        raise BadRequest("echo together with logprobs is not supported (prompt logprobs are not computed)", param="echo")
    if req.suffix:
        raise BadRequest("suffix is not supported; use /infill for fill-in-the-middle", param="suffix")
    tokenizer = engine.tokenizer
    prompts = req.prompts()
    context = engine.engine.max_model_len
    prompt_ids = [await encode_prompt(tokenizer, p, context) if isinstance(p, str) else check_token_ids(engine, p)
                  for p in prompts]
    prompt_texts = [p if isinstance(p, str) else tokenizer.decode(p, skip_special_tokens=False) for p in prompts]
    max_tokens = default_max_tokens(req.max_tokens, state.config.default_max_tokens, LEGACY_COMPLETIONS_MAX_TOKENS)
    ids, params = [], []
    for ids_one in prompt_ids:
        for j in range(req.n):
            ids.append(ids_one)
            params.append(sampling_params(req, max_tokens, req.logprobs, seed_offset=j,
                                          defaults=state.sampling_defaults))
            params[-1].max_pattern_size, params[-1].min_count = req.max_pattern_size, req.min_count
            params[-1].min_pattern_size = req.min_pattern_size
    await admit(state.reported_model(req.model), ids, params, context)
    request_id = new_id("cmpl")
    submission = Submission(request_id, request_priority(raw), req.cache_prompt, req.cache_salt)
    generation = submit(engine, submission, ids, params)
    echo = [prompt_texts[k // req.n] if req.echo else "" for k in range(len(ids))]
    if req.stream:
        return sse_response(_stream(state, req, request_id, generation, echo))
    choices = await generation.collect(raw)
    finals = [c.final for c in choices]
    return CompletionResponse(
        id=request_id,
        model=state.reported_model(req.model),
        choices=[
            CompletionChoice(
                index=c.index,
                text=echo[c.index] + c.text,
                logprobs=completion_logprobs(tokenizer, c.logprobs, len(echo[c.index])) if req.logprobs is not None else None,
                finish_reason=c.final.finish_reason,
                stop_reason=c.final.stop_reason,
            )
            for c in choices
        ],
        usage=_usage(finals, req.n),
        system_fingerprint=state.system_fingerprint,
    )


def _usage(finals, n: int) -> UsageInfo:
    # Each distinct prompt counts once, whatever n is.
    prompt = sum(f.usage.prompt_tokens for f in finals[::n])
    cached = sum(f.usage.cached_tokens for f in finals[::n])
    completion = sum(f.usage.completion_tokens for f in finals)
    return UsageInfo(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


async def _stream(state: ServerState, req: CompletionRequest, request_id: str, generation: Generation,
                  echo: list[str]) -> AsyncIterator[str]:
    tokenizer = state.engine.tokenizer
    created = int(time.time())
    model = state.reported_model(req.model)
    offsets = [len(e) for e in echo]
    finals = [None] * len(generation)

    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    envelope = CompletionResponse(id=request_id, created=created, model=model, choices=[],
                                  system_fingerprint=state.system_fingerprint).model_dump()
    if not include_usage:
        del envelope["usage"]  # present, null until the last chunk, only when asked for
    frame = ChunkFrame(envelope)

    def chunk(choices: list[CompletionChoice]) -> str:
        # finish_reason and logprobs stay present (null until set), as OpenAI sends them.
        dumped = [c.model_dump() for c in choices]
        for choice in dumped:
            if choice["stop_reason"] is None:
                del choice["stop_reason"]
        return frame.event(dumped)

    for i, text in enumerate(echo):
        if text:
            yield chunk([CompletionChoice(index=i, text=text)])
    async with generation:
        async for i, out in generation:
            logprobs = None
            if req.logprobs is not None and out.logprobs:
                logprobs = completion_logprobs(tokenizer, out.logprobs, offsets[i])
            offsets[i] += len(out.text)
            if out.finished:
                finals[i] = out
            if out.text or logprobs or out.finished:
                yield chunk([CompletionChoice(index=i, text=out.text, logprobs=logprobs,
                                              finish_reason=out.finish_reason if out.finished else None)])
    if include_usage:
        yield sse({**envelope, "usage": _usage(finals, req.n).model_dump()})
    yield DONE
