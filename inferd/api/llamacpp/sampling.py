"""llama-server's sampling fields to engine `SamplingParams`, and back to the
`generation_settings` object its responses echo."""

from __future__ import annotations

import math
import re

from inferd.api.llamacpp.protocol import GenerationFields
from inferd.engine.sampling_params import SamplingParams
from inferd.models.tokenizer import Tokenizer
from inferd.http.errors import BadRequest

# llama.cpp's "no seed given": the sampler draws a random one.
RANDOM_SEED = 0xFFFFFFFF

# Engine parameter names as llama-server clients know them.
LLAMA_NAMES = {"max_tokens": "n_predict", "repetition_penalty": "repeat_penalty", "logprobs": "n_probs"}
_ENGINE_NAME = re.compile(r"\b(" + "|".join(LLAMA_NAMES) + r")\b")


def sampling_params(req: GenerationFields, tokenizer: Tokenizer, default_max_tokens: int | None,
                    defaults: dict | None = None) -> SamplingParams:
    """`defaults`: the server's (--temp, --seed, ...), for the fields a request leaves unset."""
    n_predict = req.requested_n_predict()
    if n_predict == 0:
        raise BadRequest("n_predict 0 (evaluate the prompt only) is not supported; set n_predict to -1 or at least 1",
                         param="n_predict")
    if n_predict is None:
        max_tokens = default_max_tokens
    else:
        max_tokens = None if n_predict == -1 else n_predict
    server = defaults or {}
    given = req.model_fields_set

    def value(field: str, engine_name: str):
        return server[engine_name] if field not in given and engine_name in server else getattr(req, field)

    seed = None if req.seed in (-1, RANDOM_SEED) else req.seed
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=max(value("temperature", "temperature"), 0.0),
        top_k=max(value("top_k", "top_k"), 0),
        top_p=value("top_p", "top_p"),
        min_p=value("min_p", "min_p"),
        repetition_penalty=value("repeat_penalty", "repetition_penalty"),
        presence_penalty=value("presence_penalty", "presence_penalty"),
        frequency_penalty=value("frequency_penalty", "frequency_penalty"),
        logit_bias=logit_bias(req, tokenizer),
        seed=server.get("seed") if seed is None else seed,
        logprobs=req.n_probs or None,
        post_sampling_probs=req.post_sampling_probs,
        stop=req.stop_list(),
        ignore_eos=req.ignore_eos,
    )


def logit_bias(req: GenerationFields, tokenizer: Tokenizer) -> dict[int, float] | None:
    """Pairs or an object; a key is a token id or text whose every token gets the bias."""
    if not req.logit_bias:
        return None
    pairs = req.logit_bias.items() if isinstance(req.logit_bias, dict) else req.logit_bias
    bias: dict[int, float] = {}
    for key, value in pairs:
        if value is True:
            raise BadRequest(f"logit_bias for {key!r} is true; give a number, or false to ban the token",
                             param="logit_bias")
        amount = -math.inf if value is False else float(value)
        for token_id in _bias_targets(key, tokenizer):
            bias[token_id] = amount
    return bias


def _bias_targets(key: int | str, tokenizer: Tokenizer) -> list[int]:
    if isinstance(key, int):
        return [key]
    if key.lstrip("-").isdigit():  # object keys are strings even when they name an id
        return [int(key)]
    return tokenizer.encode(key, add_special_tokens=False)


def generation_settings(req: GenerationFields, params: SamplingParams) -> dict:
    """The settings a request ran with, under llama-server's names."""
    n_predict = -1 if params.max_tokens is None else params.max_tokens
    return {
        "n_predict": n_predict,
        "seed": RANDOM_SEED if params.seed is None else params.seed,
        "temperature": params.temperature,
        "top_k": params.top_k,
        "top_p": params.top_p,
        "min_p": params.min_p,
        "repeat_penalty": params.repetition_penalty,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "stop": list(params.stop),
        "max_tokens": n_predict,
        "ignore_eos": params.ignore_eos,
        "stream": req.stream,
        "n_probs": req.n_probs,
        # JSON has no -inf: a ban is written as false, the way requests spell it.
        "logit_bias": [
            {"token": token_id, "bias": False if amount == -math.inf else amount}
            for token_id, amount in (params.logit_bias or {}).items()
        ],
        "cache_prompt": req.cache_prompt,
    }


def llama_words(text: str) -> str:
    """Engine parameter names in `text` as this API spells them."""
    return _ENGINE_NAME.sub(lambda m: LLAMA_NAMES[m[1]], text)


def in_llama_terms(error: ValueError) -> BadRequest:
    """An engine validation error, with its parameter names as this API spells them."""
    message = llama_words(str(error))
    field = getattr(error, "field", None)
    return BadRequest(message, param=LLAMA_NAMES.get(field, field))
