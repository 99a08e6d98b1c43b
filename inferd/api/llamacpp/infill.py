"""POST /infill: fill-in-the-middle for code models.

The prompt is [BOS] extra-context <prefix-marker> input_prefix
<suffix-marker> input_suffix <middle-marker> prompt, and the model writes
the middle; everything after that is /completion.
"""

from __future__ import annotations

from fastapi import Request

from inferd.api.llamacpp.completion import run_completion
from inferd.api.llamacpp.prompts import tokenize_prompt
from inferd.api.llamacpp.protocol import InfillRequest, InputExtraChunk
from inferd.models.tokenizer import Tokenizer
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState


def extra_context_text(chunks: list[InputExtraChunk]) -> str:
    """Other files the middle may depend on, each under a header naming it (the vocabulary
    has no repository or file-separator markers to frame them with)."""
    return "".join(f"--- {chunk.filename or 'snippet'} ---\n{chunk.text}\n\n" for chunk in chunks)


def infill_prompt(tokenizer: Tokenizer, req: InfillRequest) -> list[int]:
    fim = tokenizer.fim_tokens
    if fim is None:
        raise BadRequest(
            "this model has no fill-in-the-middle tokens (prefix/suffix/middle markers such as <|fim_prefix|>); "
            "serve a code model trained for infill, or send the text to /completion instead"
        )
    ids = [tokenizer.bos_token_id] if tokenizer.add_bos else []
    if req.input_extra:
        ids += tokenizer.encode(extra_context_text(req.input_extra), add_special_tokens=False)
    ids.append(fim.prefix)
    ids += tokenizer.encode(req.input_prefix, add_special_tokens=False)
    ids.append(fim.suffix)
    ids += tokenizer.encode(req.input_suffix, add_special_tokens=False)
    ids.append(fim.middle)
    ids += tokenize_prompt(tokenizer, req.prompt, add_special=False)
    return ids


async def create_infill(state: ServerState, req: InfillRequest, raw: Request):
    tokenizer = state.require_engine().tokenizer
    return await run_completion(state, req, [infill_prompt(tokenizer, req)], raw)
