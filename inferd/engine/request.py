"""One request's whole state. Progress is a counter (`num_computed_tokens`),
not a phase: prefill, chunked prefill, prefix hits and recompute after
preemption are all "compute the tokens not yet in the cache"."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferd.engine.engine_request import Priority
from inferd.engine.sampling.steering import Steering

if TYPE_CHECKING:
    import torch

    from inferd.engine.sampling_params import SamplingParams
    from inferd.prefix_hash import BlockHash


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"  # EOS, stop token or stop string
    FINISHED_LENGTH = "finished_length"  # max_tokens or the context is full
    FINISHED_ABORTED = "finished_aborted"  # client went away / cancelled
    FINISHED_ERROR = "finished_error"

    @property
    def finished(self) -> bool:
        return self in FINISH_REASONS


# The only place a finish reason is named; the HTTP layers map from these.
FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}

_arrivals = itertools.count()


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: Priority = Priority.NORMAL
    cache_prompt: bool = True  # False: a cold prefill that neither reads nor donates cache blocks
    cache_salt: str | None = None  # enters the first block's hash: only equal salts share cache
    arrival: int = field(default_factory=lambda: next(_arrivals))
    arrival_time: float = field(default_factory=time.monotonic)

    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache (first admission)
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[BlockHash] = field(default_factory=list)  # hashes of full blocks, in order
    num_cached_blocks: int = 0  # leading blocks already registered in the prefix cache
    generator: torch.Generator | None = None
    stop_reason: int | str | None = None  # the stop token id or stop string that ended it
    first_token_time: float | None = None
    first_scheduled_time: float | None = None  # when a step first gave it tokens: its queue time ends here
    num_preemptions: int = 0
    slot: int | None = None  # which of the --parallel slots it occupies while running
    steering: Steering = field(default_factory=Steering)  # the grammar and thinking budget, when used
    draft_token_ids: list[int] = field(default_factory=list)  # speculative tokens this step verifies (never output yet)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def finish_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)

    def sort_key(self) -> tuple[int, int]:
        return (int(self.priority), self.arrival)
