"""What the engine tells its callers, one delta per request per step.
Torch-free, so the HTTP side reads them without importing the engine."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprobs:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # (id, logprob), highest first; empty when params.logprobs == 0


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # prompt tokens served from the prefix cache

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RequestTiming:
    """Monotonic timestamps (time.monotonic) of one finished request."""

    arrival: float
    first_token: float | None
    finished: float

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    def time_per_output_token(self, completion_tokens: int) -> float | None:
        if self.first_token is None or completion_tokens < 2:
            return None
        return (self.finished - self.first_token) / (completion_tokens - 1)


@dataclass
class SlotState:
    """One running sequence, as /slots shows it."""

    slot: int
    request_id: str
    prompt_tokens: int
    generated_tokens: int
    computed_tokens: int
    cached_tokens: int
    max_tokens: int | None
    priority: str


@dataclass
class RequestOutput:
    request_id: str
    token_ids: list[int] = field(default_factory=list)  # new since the last delta
    text: str = ""  # new text since the last delta
    logprobs: list[TokenLogprobs] | None = None
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: int | str | None = None  # the stop token id or stop string
    usage: Usage | None = None
    timing: RequestTiming | None = None  # set on the final delta
    scheduled: float | None = None  # when the request was first scheduled (monotonic); None while it waits
    error: str | None = None
    error_is_client: bool = False  # the request's own parameters caused the error
    error_is_shutdown: bool = False  # the server stopped first: the same request can run elsewhere or later

    def merge(self, later: "RequestOutput") -> None:
        """Fold a later delta into this one (a slow reader gets fewer, larger deltas)."""
        self.token_ids += later.token_ids
        self.text += later.text
        if later.logprobs is not None:
            self.logprobs = (self.logprobs or []) + later.logprobs
        self.finished, self.finish_reason = later.finished, later.finish_reason
        self.stop_reason, self.usage, self.error = later.stop_reason, later.usage, later.error
        self.timing, self.error_is_client = later.timing, later.error_is_client
        self.error_is_shutdown = later.error_is_shutdown
        self.scheduled = later.scheduled if self.scheduled is None else self.scheduled


@dataclass
class EngineStats:
    running: int
    waiting: int
    max_running: int
    kv_blocks_total: int
    kv_blocks_used: int
    block_size: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prompt_tokens_total: int  # prompt tokens admitted
    tokens_computed_total: int  # tokens run through the model (prefill chunks + decodes; cache hits excluded)
    generation_tokens_total: int
    preemptions: int
    steps: int
    slots: list[SlotState] = field(default_factory=list)
    draft_tokens: int = 0  # speculative draft tokens verified (--speculative)
    accepted_draft_tokens: int = 0  # of those, the ones the sampler agreed with

    @property
    def draft_acceptance_rate(self) -> float:
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total
