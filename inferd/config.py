"""Configuration as documented dataclasses. The CLI is generated from them:
each field's `help` metadata becomes its `--flag` help, and `INFERD_<NAME>`
environment variables supply defaults."""

from __future__ import annotations

from dataclasses import dataclass, field


def option(default, help: str, flag: str | None = None, short: str | None = None):
    return field(default=default, metadata={"help": help, "flag": flag, "short": short})


@dataclass
class ModelOptions:
    model: str | None = option(None, "a .gguf file or a Hugging Face folder; default: the bundled Gemma 3 270M", short="-m")
    dtype: str = option("auto", "weight and activation dtype: auto (bfloat16), bfloat16, float16, float32")
    device: str = option("auto", "auto (cuda when torch sees a GPU, else cpu), cpu, cuda, cuda:N")
    threads: int = option(0, "CPU threads for torch; 0 = torch's default", short="-t")


@dataclass
class EngineOptions:
    ctx_size: int = option(4096, "maximum tokens per sequence (prompt + output)", short="-c")
    parallel: int = option(4, "maximum sequences decoded together", short="-np")
    block_size: int = option(16, "tokens per KV-cache block")
    kv_cache_memory: int = option(0, "KV-cache size in MiB; 0 = ctx_size x parallel tokens")
    num_kv_blocks: int = option(0, "KV-cache size in blocks, overriding --kv-cache-memory; 0 = derived")
    max_batched_tokens: int = option(512, "token budget of one engine step; long prompts are prefilled in chunks of this size")
    max_queue: int = option(256, "requests allowed to wait for a slot before new ones are refused")


@dataclass
class EngineConfig(ModelOptions, EngineOptions):
    pass
