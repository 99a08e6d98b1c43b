"""Ollama's `options` and `format` in engine terms: SamplingParams and a GrammarSpec."""

from __future__ import annotations

from inferd.api.ollama.protocol import Format, Options
from inferd.chat.grammar import GrammarSpec
from inferd.chat.json_schema_strict import closed_objects
from inferd.engine.sampling_params import SamplingParams
from inferd.http.errors import BadRequest
from inferd.serving.sampling import fill_defaults

# Ollama's option name -> SamplingParams field, where they differ only in name.
_RENAMED = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "repeat_penalty": "repetition_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


def max_tokens(options: Options, default: int | None, prompt_len: int, server_ctx: int) -> int | None:
    """num_predict, bounded by num_ctx when the request asks for a smaller context
    than the server's (a larger one is the server's); None = until the context is full."""
    n = options.num_predict
    if n == 0 or (n is not None and n < -2):
        raise BadRequest("options.num_predict must be a positive count, or -1 to generate until the context is full",
                         param="options.num_predict")
    limit = default if n is None else (None if n < 0 else n)
    ctx = min(options.num_ctx or server_ctx, server_ctx)
    if ctx < server_ctx:
        room = ctx - prompt_len
        if room < 1:
            raise BadRequest(f"the prompt is {prompt_len} tokens, which leaves no room in num_ctx {ctx}",
                             param="options.num_ctx")
        limit = room if limit is None else min(limit, room)
    return limit


def sampling_params(options: Options, limit: int | None, stop: list[str], defaults: dict | None = None) -> SamplingParams:
    """`defaults`: the server's (--temp, --seed, ...), for the options a request leaves unset."""
    seed = options.seed if options.seed is not None else (defaults or {}).get("seed")
    p = SamplingParams(max_tokens=limit, seed=seed, stop=list(options.stop or []))
    p.stop += [s for s in stop if s not in p.stop]
    return fill_defaults(p, defaults, **{name: getattr(options, option) for option, name in _RENAMED.items()})


def output_grammar(fmt: Format) -> GrammarSpec | None:
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return GrammarSpec("json_object")
    return GrammarSpec.json_schema(closed_objects(fmt))
