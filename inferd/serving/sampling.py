"""Engine sampling parameters from a request, with the one source of
defaults (`sampling_defaults`) and the one max_tokens policy:

max_tokens when a request sets none: `--default-max-tokens` when the server
sets it; otherwise the route's documented default, which is "until the
context is full" everywhere except OpenAI's legacy `/v1/completions`, whose
API reference defines 16.
"""

from __future__ import annotations

from inferd.engine.sampling_params import SamplingParams
from inferd.serving.chat_request import SamplingFields
from inferd.serving.sampling_defaults import DEFAULT_SAMPLING

# OpenAI's documented default for /v1/completions.
LEGACY_COMPLETIONS_MAX_TOKENS = 16


def default_max_tokens(requested: int | None, server_default: int | None, route_default: int | None = None) -> int | None:
    """The limit a request runs with; None generates until the context is full."""
    if requested is not None:
        return requested
    return server_default if server_default is not None else route_default


def fill_defaults(params: SamplingParams, defaults: dict | None = None, **given: float | int | None) -> SamplingParams:
    """Set each given sampling field, or its default when the request left it unset:
    the server's (`defaults`, from `server_sampling`) where given, else the built-in ones."""
    for name, value in given.items():
        if value is None:
            value = (defaults or DEFAULT_SAMPLING).get(name)
        if value is not None:
            setattr(params, name, value)
    return params


def unseeded(defaults: dict | None) -> int | None:
    """The seed of a request that sets none: the server's --seed, else random."""
    return (defaults or {}).get("seed")


def sampling_params(req: SamplingFields, max_tokens: int | None, logprobs: int | None,
                    seed_offset: int = 0, defaults: dict | None = None) -> SamplingParams:
    """Engine sampling parameters of an OpenAI-shaped request (chat or completions)."""
    bias = None
    if req.logit_bias:
        try:
            bias = {int(k): float(v) for k, v in req.logit_bias.items()}
        except ValueError:
            raise ValueError("logit_bias keys must be token ids (integers as strings)") from None
    seed = req.seed if req.seed is not None else unseeded(defaults)
    p = SamplingParams(
        max_tokens=max_tokens,
        min_tokens=req.min_tokens,
        logit_bias=bias,
        seed=None if seed is None else seed + seed_offset,  # one per choice
        logprobs=logprobs,
        stop=req.stop_list(),
        stop_token_ids=list(req.stop_token_ids or []),
        ignore_eos=req.ignore_eos,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
    )
    return fill_defaults(p, defaults, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
                         presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
                         repetition_penalty=req.repetition_penalty)
