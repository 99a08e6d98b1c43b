"""Configuration as documented dataclasses. The CLI is generated from them:
each field's `help` metadata becomes its `--flag` help, and `INFERD_<NAME>`
environment variables supply defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.discovery.record import DEFAULT_PREFIX


def option(default, help: str, flag: str | None = None, short: str | None = None):
    return field(default=default, metadata={"help": help, "flag": flag, "short": short})


@dataclass
class ModelOptions:
    model: str | None = option(None, "a .gguf file, a Hugging Face folder, or a stored model's name (inferd list); default: the bundled Gemma 3 270M", short="-m")
    dtype: str = option("auto", "weight and activation dtype: auto (bfloat16 where the CPU computes it natively: AVX512-BF16, AMX, Arm BF16; else float32), bfloat16, float16, float32")
    device: str = option("auto", "auto (cuda when torch sees a GPU, else cpu), cpu, cuda, cuda:N")
    threads: int = option(0, "CPU threads for torch; 0 = torch's default", short="-t")
    data_dir: str | None = option(None, "folder for stored state: the model store (--model may name a stored model), stored responses; default: $XDG_DATA_HOME/inferd or ~/.local/share/inferd")
    weights: str = option("auto", "weight format: auto (gguf for a GGUF file on CPU, else bf16), gguf (the file's own quantized blocks, exact), bf16 (as --dtype), or on CPU, lossy but faster to decode: mixed (int8 projections and int4 LM head for decode, dense for prefill), int8, int4")


@dataclass
class EngineOptions:
    ctx_size: int = option(4096, "maximum tokens per sequence (prompt + output). Unlike llama-server's -c, the total "
                           "across its slots, each of the --parallel sequences gets this many here", short="-c")
    parallel: int = option(4, "maximum sequences decoded together", short="-np")
    block_size: int = option(16, "tokens per KV-cache block")
    kv_cache_memory: int = option(0, "KV-cache size in MiB; 0 = ctx_size x parallel tokens")
    num_kv_blocks: int = option(0, "KV-cache size in blocks, overriding --kv-cache-memory; 0 = derived")
    max_batched_tokens: int = option(512, "token budget of one engine step; long prompts are prefilled in chunks of this size")
    max_queue: int = option(256, "requests allowed to wait for a slot before new ones are refused")
    speculative: str = option("auto", "speculative decoding: ngram (drafts looked up in the request's own prompt and output, verified in one pass; greedy requests only, each kept while it pays by this engine's measured step costs), auto (ngram where verification is exact: a GGUF model's own blocks, output unchanged bit for bit; off elsewhere) or off")
    spec_tokens: int = option(4, "most draft tokens verified per step with --speculative ngram")
    draft_model: str | None = option(None, "a smaller model sharing the model's tokenizer (a path or a stored model's name) whose greedy tokens are the speculative drafts, instead of prompt lookup; with --speculative ngram or auto")
    spec_max_batch: int = option(2, "speculate only while at most this many requests run; wider batches gain little from it")


@dataclass
class EngineConfig(ModelOptions, EngineOptions):
    pass


@dataclass
class ServerOptions:
    host: str = option("127.0.0.1", "address to listen on; a path ending in .sock serves on a Unix socket")
    port: int = option(8080, "port to listen on; 0 picks a free one (the log prints it)")
    api_key: list[str] = option((), "API key clients must send (repeatable, or comma-separated)")
    api_key_file: str | None = option(None, "file with one API key per line")
    alias: list[str] = option((), "the name the served model answers to and reports (repeatable or comma-separated; the first is its id, the rest and its own name are also accepted)", short="-a")
    default_model: str | None = option(None, "the model that serves requests naming a model not served here; default: the one model served, unless --strict-model-names")
    strict_model_names: bool = option(False, "answer 404 to a request naming a model not served here, even with one model")
    chat_template_kwargs: str | None = option(None, "JSON object of chat-template variables every request gets, under its own chat_template_kwargs, e.g. '{\"enable_thinking\": false}'")
    chat_template: str | None = option(None, "chat template: a built-in name (gemma, chatml, llama3), a Jinja file, or the template text itself")
    metrics: bool = option(False, "serve Prometheus metrics at /metrics")
    slots: bool = option(True, "serve per-slot state at /slots")
    slot_save_path: str | None = option(None, "an existing folder where POST /slots/{id}?action=save|restore writes and reads a slot's cached tokens and KV (llama-server's); default: those actions are off")
    max_body_size: int = option(8 * 2**20, "largest request body accepted, in bytes")
    shutdown_timeout: float = option(30.0, "seconds in-flight requests may take to finish on SIGTERM")
    default_max_tokens: int | None = option(None, "max_tokens when a request sets none; default: until the context is full")
    tool_call_parser: str | None = option(None, "tool-call format: hermes, llama3_json, mistral, generic_json; default: detected from the vocabulary")
    reasoning_format: str = option("deepseek", "deepseek: <think> text goes to reasoning_content; none: left in content")
    reasoning_budget: int = option(-1, "reasoning tokens allowed before </think> is forced; -1 = unlimited")
    responses_ttl: float = option(30 * 24 * 3600.0, "seconds a stored response is kept")
    responses_max: int = option(10000, "stored responses kept; the oldest go first")
    max_file_size: int = option(512 * 2**20, "largest file accepted by POST /v1/files (batch inputs), in bytes")
    batch_concurrency: int = option(0, "batch items run at once, at low priority behind interactive requests (which preempt them); 0 = --parallel")
    register: str | None = option(None, "etcd://HOST:PORT: register this worker in etcd under a lease, for `inferd router --etcd`")
    register_prefix: str = option(DEFAULT_PREFIX, "etcd key prefix to register under")
    register_ttl: float = option(10.0, "lease seconds: a worker that dies without deregistering leaves the fleet after this")
    advertise_url: str | None = option(None, "URL routers use to reach this worker; default: http://HOST:PORT of the listening socket")
    rate_limit_storage: str = option("memory://", "where API keys' rate-limit counters live: memory://, or redis://HOST:PORT to share them between servers")
    isolate_cache: str = option("none", "per-key: each API key's prompts share prefix-cache blocks only with its own, so no tenant can time another's prompts")
    cors_origin: list[str] = option((), "an origin browsers may call from, e.g. https://app.example (repeatable; * allows any)")


@dataclass
class SamplingOptions:
    """What a request that leaves a sampling field unset runs with (llama-server's flags
    and defaults, which keep small models coherent; OpenAI's temperature 1 does not)."""

    temperature: float = option(0.8, "temperature of requests that set none; 0 = greedy", flag="--temp")
    top_k: int = option(40, "top-k of requests that set none; 0 = off")
    top_p: float = option(0.95, "top-p of requests that set none; 1 = off")
    min_p: float = option(0.05, "min-p of requests that set none; 0 = off")
    repeat_penalty: float = option(1.0, "repetition penalty of requests that set none; 1 = off")
    presence_penalty: float = option(0.0, "presence penalty of requests that set none")
    frequency_penalty: float = option(0.0, "frequency penalty of requests that set none")
    seed: int = option(-1, "seed of requests that set none, so identical requests give identical text; -1 = random", short="-s")


@dataclass
class AudioOptions:
    whisper_model: str | None = option(None, "speech to text: a Whisper model in CTranslate2 form (a folder, or its name in the model store); default: the bundled Whisper tiny.en")
    voice: list[str] = option((), "text to speech: a Piper voice (.onnx, its .onnx.json beside it, or its name in the model store), repeatable; the first is the default; default: the bundled en_US-joe-medium")
    audio_parallel: int = option(1, "audio requests (transcription, speech) worked on at once, off the event loop")
    audio_queue: int = option(16, "audio requests allowed to wait for a turn before new ones get 503")
    max_audio_size: int = option(25 * 2**20, "largest audio upload accepted, in bytes")
    max_audio_duration: float = option(3600.0, "longest audio accepted for transcription, in seconds")


@dataclass
class EmbeddingOptions:
    embedding_model: list[str] = option((), "an embedding model (a BERT-family folder, or all-minilm-l6-v2, bundled) or a cross-encoder reranker, served beside --model (repeatable)")
    pooling: str | None = option(None, "pooling: none (a vector per token), mean, cls, last, max; serves a chat model's embeddings, or overrides an embedding model's own (sentence-transformers config)")
    embedding_dtype: str = option("auto", "dtype of embedding and rerank models: auto (bfloat16 on CUDA and CPUs with AVX512-BF16 or AMX, 2-3x faster there, cosine to float32 ~0.9999; else float32), float32, bfloat16")
    embedding_batch_tokens: int = option(4096, "token budget of one embedding or rerank forward (inputs x the longest); requests that arrive together share it")


@dataclass
class ModelHostOptions:
    models: list[str] = field(default=(), metadata={"help": "every --model given, in order: the first is the server's own, the rest load on demand", "collected_from": "model"})
    model_aliases: dict[str, list[str]] = field(default_factory=dict, metadata={"help": "each --alias given after a second or later --model: the names that model answers to, by the --model it follows (the first is its id)", "aliases_of": ("alias", "models")})
    preload: list[str] = option((), "a model (served here or stored) to load at start rather than on its first request (repeatable)")
    keep_alive: str = option("5m", "how long a model loaded on demand stays after its last request: a duration (5m, 1h, 90s), seconds, 0 (unload at once) or -1 (stay); Ollama's keep_alive sets it per request")
    max_loaded_models: int = option(3, "models loaded on demand held at once (0 = no limit); the least recently used idle one is unloaded first")
    memory_budget: str | None = option(None, "memory the models loaded on demand may hold together (weights and KV cache), like 8G or 512M; default: 80%% of the memory available at start")


@dataclass
class ServeConfig(ModelHostOptions, EmbeddingOptions, AudioOptions, SamplingOptions, ServerOptions, EngineConfig):
    pass


@dataclass
class RouterOptions:
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on; 0 picks a free one (the log prints it)")
    worker: list[str] = option((), "a worker's base URL, optionally MODEL=URL (repeatable)")
    etcd: str | None = option(None, "etcd HOST:PORT whose worker registrations make up the fleet")
    etcd_prefix: str = option(DEFAULT_PREFIX, "etcd key prefix workers register under")
    etcd_keys_prefix: str = option("/inferd/keys/", "etcd key prefix under which router replicas share API keys (hashes only)")
    policy: str = option("kv-aware", "routing policy: kv-aware, precise, round-robin, least-load, direct")
    # kv-aware: how much of a prompt must match a worker's tree before locality beats load.
    cache_threshold: float = option(0.5, "kv-aware: route to the longest prefix match only above this match rate (0..1)")
    # Imbalanced (the least loaded wins) when both hold: max - min > balance_abs, max > balance_rel x min.
    balance_abs: int = option(8, "kv-aware: in-flight gap between busiest and idlest worker that may count as imbalance")
    balance_rel: float = option(1.5, "kv-aware: busiest/idlest in-flight ratio that may count as imbalance")
    max_tree_chars: int = option(2_000_000, "kv-aware: characters of routed prompts remembered per worker (least recently used go first)")
    kv_overlap_weight: float = option(1.0, "precise: cost weight of each prompt block a worker must still prefill")
    tokenizer: str | None = option(None, "precise: the fleet's model (.gguf or Hugging Face folder) for its tokenizer and chat template; default: the bundled model")
    health_interval: float = option(2.0, "seconds between health checks of each worker; 0 = none (always ready)")
    breaker_failures: int = option(3, "consecutive failures that take a worker out of rotation")
    breaker_successes: int = option(2, "consecutive successes that bring it back")
    breaker_cooldown: float = option(5.0, "seconds an unhealthy worker gets no traffic before it is tried again")
    request_timeout: float = option(600.0, "seconds a worker may take to answer a non-streaming request; 0 = no limit")
    worker_api_key: str | None = option(None, "API key sent to workers as 'Authorization: Bearer'")
    api_key: list[str] = option((), "API key clients must send (repeatable)")
    data_dir: str | None = option(None, "folder for the key store (API keys, usage); default: $XDG_DATA_HOME/inferd or ~/.local/share/inferd")
    rate_limit_storage: str = option("memory://", "where API keys' rate-limit counters live: memory://, or redis://HOST:PORT to share them between router replicas")
    cors_origin: list[str] = option((), "an origin browsers may call from, e.g. https://app.example (repeatable; * allows any)")
    metrics: bool = option(True, "serve Prometheus metrics at /metrics")
    max_body_size: int = option(8 * 2**20, "largest request body accepted, in bytes")
    max_audio_size: int = option(25 * 2**20, "largest audio upload forwarded, in bytes")
    max_file_size: int = option(512 * 2**20, "largest file upload (POST /v1/files) forwarded, in bytes")
    shutdown_timeout: float = option(30.0, "seconds in-flight requests may take to finish on SIGTERM")
