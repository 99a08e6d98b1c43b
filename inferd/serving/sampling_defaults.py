"""Sampling when a request leaves a field unset: llama-server's and Ollama's
defaults (config.SamplingOptions), or a server's own (--temp, --seed, ...).
Every dialect and `inferd generate` take their defaults from here."""

from inferd.config import SamplingOptions

DEFAULT_SAMPLING = {name: getattr(SamplingOptions, name) for name in ("temperature", "top_k", "top_p", "min_p")}


def server_sampling(config) -> dict:
    """A server's own defaults (--temp, --top-k, --top-p, --min-p, the penalties,
    --seed) under SamplingParams' names; seed None draws a random one."""
    return {"temperature": config.temperature, "top_k": config.top_k, "top_p": config.top_p, "min_p": config.min_p,
            "repetition_penalty": config.repeat_penalty, "presence_penalty": config.presence_penalty,
            "frequency_penalty": config.frequency_penalty, "seed": None if config.seed < 0 else config.seed}
