"""When a request's output ends. After each sampled token the rules are
checked in this order, and the first that holds ends the request:

1. a stop token: EOS (unless ignore_eos) or one of stop_token_ids; its text
   is never shown;
2. a stop string in the text (the detokenizer holds back partial matches);
3. the grammar is complete;
4. the loop guard sees the output repeating itself;
5. max_tokens are out, or the context is full ("length").

Rules 1-4 finish as "stop", 5 as "length". Text held back for a possible
stop string is released when the output ends any other way than by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.engine.detokenizer import IncrementalDetokenizer
from inferd.engine.loop_guard import LoopGuard
from inferd.engine.request import RequestStatus
from inferd.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class Finish:
    status: RequestStatus
    stop_reason: int | str | None = None  # the stop token id or stop string


class StopRules:
    """One request's rules; owns its detokenizer, since stop strings are found in the text."""

    def __init__(
        self,
        params: SamplingParams,
        detokenizer: IncrementalDetokenizer,
        eos_token_ids: frozenset[int],
        max_model_len: int,
    ):
        eos = frozenset() if params.ignore_eos else eos_token_ids
        self.stop_token_ids = eos | frozenset(params.stop_token_ids)
        self.max_tokens = params.max_tokens
        self.max_model_len = max_model_len
        self.detokenizer = detokenizer
        self.loop_guard = (LoopGuard(params.max_pattern_size, params.min_count, params.min_pattern_size or 1)
                           if params.min_count else None)

    def add(
        self, token: int, *, num_output_tokens: int, num_tokens: int, grammar_done: bool
    ) -> tuple[str, Finish | None]:
        """The text `token` adds, and how the output ends if it does. The counts include `token`."""
        if token in self.stop_token_ids:
            return self.detokenizer.flush(), Finish(RequestStatus.FINISHED_STOPPED, token)
        delta = self.detokenizer.add_tokens([token])
        if delta.stop_string is not None:
            return delta.text, Finish(RequestStatus.FINISHED_STOPPED, delta.stop_string)
        finish = None
        if grammar_done or (self.loop_guard is not None and self.loop_guard.add(token)):
            finish = Finish(RequestStatus.FINISHED_STOPPED)
        elif (self.max_tokens is not None and num_output_tokens >= self.max_tokens) or num_tokens >= self.max_model_len:
            finish = Finish(RequestStatus.FINISHED_LENGTH)
        if finish is None:
            return delta.text, None
        return delta.text + self.detokenizer.flush(), finish
