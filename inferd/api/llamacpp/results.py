"""The fields llama-server reports once a completion has finished."""

from __future__ import annotations

from inferd.engine.outputs import RequestOutput


def stop_type(final: RequestOutput) -> str:
    """eos (an end-of-generation token), word (a stop string), limit (n_predict or a full context), none."""
    if final.finish_reason == "stop":
        return "word" if isinstance(final.stop_reason, str) else "eos"
    if final.finish_reason == "length":
        return "limit"
    return "none"


def visible_tokens(token_ids: list[int], last: RequestOutput) -> list[int]:
    """`token_ids` up to `last` (a delta or the final), without the end-of-generation
    token that ended the request: like its text, it is not part of the completion."""
    if last.finished and stop_type(last) == "eos" and token_ids:
        return token_ids[:-1]
    return list(token_ids)


def _rate(count: int, ms: float) -> tuple[float, float]:
    """(ms per token, tokens per second); zero when nothing was measured."""
    if count <= 0 or ms <= 0:
        return 0.0, 0.0
    return ms / count, count * 1000.0 / ms


def timings(final: RequestOutput) -> dict:
    """Prompt time runs from arrival to the first token (queueing included), generation from there to the end."""
    usage, timing = final.usage, final.timing
    prompt_n = usage.prompt_tokens - usage.cached_tokens
    predicted_n = usage.completion_tokens
    if timing is None or timing.first_token is None:
        prompt_ms = (timing.finished - timing.arrival) * 1000.0 if timing else 0.0
        predicted_ms = 0.0
    else:
        prompt_ms = (timing.first_token - timing.arrival) * 1000.0
        predicted_ms = (timing.finished - timing.first_token) * 1000.0
    prompt_per_token_ms, prompt_per_second = _rate(prompt_n, prompt_ms)
    predicted_per_token_ms, predicted_per_second = _rate(predicted_n, predicted_ms)
    return {
        "cache_n": usage.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_per_token_ms,
        "prompt_per_second": prompt_per_second,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_per_token_ms,
        "predicted_per_second": predicted_per_second,
    }


def truncated(final: RequestOutput, max_tokens: int | None) -> bool:
    """Stopped because the context filled up, before n_predict was reached."""
    if final.finish_reason != "length":
        return False
    return max_tokens is None or final.usage.completion_tokens < max_tokens


def final_fields(final: RequestOutput, max_tokens: int | None) -> dict:
    return {
        "tokens_predicted": final.usage.completion_tokens,
        "tokens_evaluated": final.usage.prompt_tokens,
        "truncated": truncated(final, max_tokens),
        "stop_type": stop_type(final),
        "stopping_word": final.stop_reason if isinstance(final.stop_reason, str) else "",
        "tokens_cached": final.usage.cached_tokens,
        "timings": timings(final),
    }
