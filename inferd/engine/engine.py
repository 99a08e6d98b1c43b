"""The synchronous engine: one `step()` is schedule -> forward -> sample ->
append, over the whole running batch. Not thread-safe; `AsyncEngine` owns it
on a thread of its own."""

from __future__ import annotations

import logging
import time

from inferd.arch.file_blocks import computes_lone_rows_exactly
from inferd.config import EngineConfig
from inferd.engine.detokenizer import IncrementalDetokenizer
from inferd.engine.draft_model import DraftModel
from inferd.engine.engine_request import EngineRequest
from inferd.engine.errors import RequestRejected
from inferd.engine.kv_cache import BlockPool
from inferd.engine.kv_events import KvEventHub
from inferd.engine.outputs import EngineStats, RequestOutput, RequestTiming, SlotState, TokenLogprobs, Usage
from inferd.engine.request import Request, RequestStatus
from inferd.engine.runner import ModelRunner
from inferd.engine.sampling.errors import NoValidTokenError
from inferd.engine.sampling.sampler import Sampler, SampleRow, argmax_is_enough, make_generator
from inferd.engine.sampling.steering import Steering
from inferd.engine.sampling.thinking_budget import ThinkingBudget
from inferd.engine.scheduler import ScheduledBatch, Scheduler, SchedulerConfig
from inferd.engine.slot_files import SlotMemory
from inferd.engine.speculative import Speculator, can_speculate
from inferd.engine.stop_rules import StopRules
from inferd.models.huge_pages import place_blocks_on_huge_pages
from inferd.models.loader import LoadedModel, load_model

log = logging.getLogger(__name__)


def _engine_error(stage: str, error: Exception) -> str:
    return f"this request failed in the engine while {stage} ({type(error).__name__}); see the server log"


def kv_pool_blocks(config: EngineConfig, bytes_per_token: int) -> int:
    per_seq = -(-config.ctx_size // config.block_size)
    if config.num_kv_blocks:
        blocks = config.num_kv_blocks
    elif config.kv_cache_memory:
        blocks = config.kv_cache_memory * 2**20 // (bytes_per_token * config.block_size)
    else:
        return per_seq * config.parallel
    if blocks < per_seq:
        raise ValueError(
            f"the KV cache holds {blocks * config.block_size} tokens, less than one --ctx-size {config.ctx_size} "
            "sequence; raise --kv-cache-memory or lower --ctx-size"
        )
    return blocks


def _decode_step(batch: ScheduledBatch) -> tuple[int, int] | None:
    """(requests, rows) of a step in which every request decodes and may speculate
    (one row each, plus its drafts), else None: the steps whose cost the guard compares."""
    for req, rows in zip(batch.requests, batch.num_new_tokens):
        if req.num_computed_tokens != req.num_tokens - 1 or rows != 1 + len(req.draft_token_ids) \
                or not can_speculate(req):
            return None
    return len(batch.requests), sum(batch.num_new_tokens)


class Engine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig, think_ids: tuple[int, int] | None = None):
        """`think_ids`: the single-token <think> and </think> ids
        (`chat.reasoning.think_token_ids`). Without them no request reasons:
        thinking budgets do nothing and a grammar applies from the first token."""
        self.loaded = loaded
        self.config = config
        self.tokenizer = loaded.tokenizer
        max_len = min(config.ctx_size, loaded.config.max_position_embeddings)
        self.max_model_len = max_len
        bytes_per_token = ModelRunner.kv_bytes_per_token(loaded.model, loaded.dtype, loaded.device)
        self.pool = BlockPool(kv_pool_blocks(config, bytes_per_token), config.block_size)
        self.kv_events = KvEventHub(self.pool)  # published by the step loop's owner (AsyncEngine)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.parallel,
                max_num_batched_tokens=config.max_batched_tokens,
                max_model_len=max_len,
                max_queue=config.max_queue,
                block_size=config.block_size,
            ),
            self.pool,
        )
        self.runner = ModelRunner(loaded.model, self.pool.num_blocks, config.block_size, loaded.dtype, loaded.device)
        self.sampler = Sampler()
        exact = computes_lone_rows_exactly(loaded.model)
        self.speculator = Speculator(config.speculative, config.spec_tokens, config.spec_max_batch, max_len,
                                     exact=exact, drafter=self._draft_model(loaded, config, max_len, exact))
        self.eos_token_ids = frozenset(self.tokenizer.eos_token_ids) | frozenset(loaded.config.eos_token_ids)
        self.think_ids = think_ids
        self.requests: dict[str, Request] = {}
        self.slot_memory = SlotMemory()  # what each slot ran last, for /slots save, restore and erase
        self._stops: dict[str, StopRules] = {}
        self._counters = {"prompt": 0, "computed": 0, "generated": 0, "steps": 0}
        self._weights_settled = False

    @staticmethod
    def _draft_model(loaded: LoadedModel, config: EngineConfig, max_len: int, exact: bool) -> DraftModel | None:
        if not config.draft_model:
            return None
        if config.speculative == "off":
            raise ValueError("--draft-model drafts for speculative decoding: use it with --speculative ngram or auto")
        if config.speculative == "auto" and not exact:
            log.warning("--draft-model %s is not loaded: --speculative auto speculates only where verification is "
                        "exact (a GGUF model on its own blocks, on CPU); --speculative ngram verifies anyway",
                        config.draft_model)
            return None
        draft = load_model(config.draft_model, dtype=str(loaded.dtype).removeprefix("torch."),
                           device=str(loaded.device), weights=config.weights, data_dir=config.data_dir)
        return DraftModel(draft, loaded, config.parallel, max_len, config.block_size)

    # -- requests ----------------------------------------------------------
    def validate(self, request: EngineRequest) -> None:
        """Everything that can be refused up front; raises ValueError subclasses.
        Runs once per request: in `add_request`, or in `AsyncEngine.add_request`
        before its engine thread calls `admit`."""
        params, prompt = request.params, request.prompt_token_ids
        vocab = self.loaded.config.vocab_size  # the logits' width; may exceed the tokenizer's
        params.validate(vocab, self.max_model_len)
        bad = next((t for t in prompt if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestRejected(f"prompt token id {bad} is outside the vocabulary [0, {vocab})")
        if request.cache_salt is not None and not isinstance(request.cache_salt, str):
            raise RequestRejected(f"cache_salt must be a string, got {type(request.cache_salt).__name__}")
        self.scheduler.check_fits(len(prompt), params.max_tokens)

    def add_request(self, request: EngineRequest) -> None:
        self.validate(request)
        self.admit(request)

    def admit(self, request: EngineRequest) -> None:
        """Queue a request that `validate` has passed."""
        if request.request_id in self.requests:
            raise RequestRejected(f"request id {request.request_id!r} is already in flight")
        params = request.params
        thinking = None
        if self.think_ids is not None:
            budget = None if params.thinking_budget in (None, -1) else params.thinking_budget
            thinking = ThinkingBudget(*self.think_ids, budget=budget, started=request.reasoning_started)
        req = Request(
            request.request_id, list(request.prompt_token_ids), params, priority=request.priority,
            cache_prompt=request.cache_prompt, cache_salt=request.cache_salt, generator=make_generator(params.seed),
            steering=Steering(request.constraint, thinking),
        )
        detokenizer = IncrementalDetokenizer(
            self.tokenizer, req.prompt_token_ids, skip_special_tokens=params.skip_special_tokens,
            stop=params.stop, include_stop_str_in_output=params.include_stop_str_in_output,
        )
        stops = StopRules(params, detokenizer, self.eos_token_ids, self.max_model_len)
        # Everything that can fail is built; only now does the engine know the request,
        # so a failed admission leaves nothing behind.
        self.scheduler.add(req)
        self.requests[req.request_id] = req
        self._stops[req.request_id] = stops
        self._counters["prompt"] += req.num_prompt_tokens

    def abort(self, request_id: str, status: RequestStatus = RequestStatus.FINISHED_ABORTED) -> RequestOutput | None:
        req = self.requests.get(request_id)
        if req is None:
            return None
        self.scheduler.finish(req, status)
        return self._finish_output(req, RequestOutput(request_id))

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def settle_weights(self) -> None:
        """Move the weights every decode step streams onto 2 MB pages
        (models/huge_pages.py), once: before the first step, or as soon as the
        engine thread starts (AsyncEngine), off the server's start-up."""
        if self._weights_settled:
            return
        self._weights_settled = True
        drafter = self.speculator.drafter
        for loaded in (self.loaded, *(() if drafter is None else (drafter.loaded,))):
            if loaded.device.type == "cpu":
                place_blocks_on_huge_pages(loaded.model)

    # -- one step ----------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        started = time.perf_counter()
        self.settle_weights()
        self.speculator.propose(self.scheduler.running)
        batch = self.scheduler.schedule()
        if not batch:
            return []
        decoding = _decode_step(batch)
        outputs = self._step(batch)
        if decoding:  # the speculation guard's cost model: a whole step, sampling included
            self.speculator.observe_step(*decoding, time.perf_counter() - started)
        return outputs

    def _step(self, batch: ScheduledBatch) -> list[RequestOutput]:
        self.slot_memory.bind(batch.requests)
        now = time.monotonic()
        for req in batch.requests:
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
        result = self.runner.run(batch, argmax_only=self._argmax_only)
        self.scheduler.advance(batch)
        self._counters["steps"] += 1
        self._counters["computed"] += sum(batch.num_new_tokens)
        if not result.sampling:
            return []
        if result.token_ids is not None:
            return self._take_argmax(result.token_ids, result.sampling)
        if not any(r.draft_token_ids for r in result.sampling):
            return self._sample(result.logits, result.sampling)
        plain_rows, plain, verifying, row = [], [], [], 0
        for req in result.sampling:
            k = len(req.draft_token_ids)
            if k:
                verifying.append((req, row, row + k + 1))
            else:
                plain_rows.append(row)
                plain.append(req)
            row += k + 1
        outputs = self._sample(result.logits[plain_rows], plain) if plain else []
        return outputs + [self._verify(req, result.logits[a:b]) for req, a, b in verifying]

    def _verify(self, req: Request, logits) -> RequestOutput:
        """Keep the drafts the sampler agrees with, then its own next token (`speculative.py`).
        Row j is sampled as if drafts[:j] were output already, so penalties and
        min_tokens see exactly what plain decoding would."""
        drafts = req.draft_token_ids
        try:
            rows = [
                SampleRow(req.params, req.prompt_token_ids, req.output_token_ids + drafts[:j], req.generator,
                          self.eos_token_ids)
                for j in range(len(drafts) + 1)
            ]
            tokens = self.sampler(logits, rows).token_ids
        except NoValidTokenError:
            return self._no_valid_token(req)
        except Exception as e:
            log.exception("request %s: sampling failed; ending this request", req.request_id)
            return self.fail_request(req, _engine_error("sampling", e))
        out, accepted = None, 0
        for j, tok in enumerate(tokens):
            try:
                delta = self._append(req, tok, None)
            except Exception as e:
                log.exception("request %s: processing token %d failed; ending this request", req.request_id, tok)
                delta = self.fail_request(req, _engine_error("processing its output", e), token_ids=[tok])
            if out is None:
                out = delta
            else:
                out.merge(delta)
            if out.finished or j == len(drafts) or tok != drafts[j]:
                break
            self.scheduler.accept_draft(req)
            accepted += 1
        self.speculator.record(req, len(drafts), accepted)
        self.scheduler.end_verification(req)
        return out

    def _sample_rows(self, requests: list[Request]) -> list[SampleRow]:
        return [
            SampleRow(
                r.params, r.prompt_token_ids, r.output_token_ids, r.generator, self.eos_token_ids,
                forced_token=r.steering.forced_token(), grammar=r.steering.grammar,
            )
            for r in requests
        ]

    def _argmax_only(self, requests: list[Request]) -> bool:
        return all(argmax_is_enough(row) for row in self._sample_rows(requests))

    def _take_argmax(self, token_ids: list[int], requests: list[Request]) -> list[RequestOutput]:
        """The tokens of a step whose every request needed only its argmax (`_argmax_only`),
        as the sampler would have picked them from the logits."""
        outputs = []
        for req, tok in zip(requests, token_ids):
            if tok < 0:
                outputs.append(self._no_valid_token(req))
                continue
            try:
                outputs.append(self._append(req, tok, None))
            except Exception as e:
                log.exception("request %s: processing token %d failed; ending this request", req.request_id, tok)
                outputs.append(self.fail_request(req, _engine_error("processing its output", e), token_ids=[tok]))
        return outputs

    def _no_valid_token(self, req: Request) -> RequestOutput:
        out = self.abort(req.request_id, RequestStatus.FINISHED_ERROR)
        out.error = "no token can be sampled: every logit is -inf or not finite (check logit_bias)"
        out.error_is_client = True
        return out

    def _sample(self, logits, requests: list[Request]) -> list[RequestOutput]:
        """Sample and post-process every request of the step. A failure in one
        request's work (its grammar, stop rules, detokenizing) ends that request
        alone with an error; its neighbours keep generating."""
        try:
            sampled = self.sampler(logits, self._sample_rows(requests))
        except NoValidTokenError as e:
            # Rows with no finite logit (e.g. every token banned) fail alone;
            # the rest of the batch is sampled again.
            failed = set(e.rows)
            outputs = [self._no_valid_token(requests[i]) for i in sorted(failed)]
            keep = [i for i in range(len(requests)) if i not in failed]
            if keep:
                outputs += self._sample(logits[keep], [requests[i] for i in keep])
            return outputs
        except Exception as e:
            if len(requests) == 1:
                log.exception("request %s: sampling failed; ending this request", requests[0].request_id)
                return [self.fail_request(requests[0], _engine_error("sampling", e))]
            # Some row's work raised (a grammar's mask, most likely): sample each row
            # alone, so only the one that raises again fails. Rare; the batch path stays as it is.
            outputs = []
            for i, req in enumerate(requests):
                outputs += self._sample(logits[i : i + 1], [req])
            return outputs
        outputs = []
        for req, tok, lp in zip(requests, sampled.token_ids, sampled.logprobs):
            try:  # one request's post-processing: free in 3.11 unless it raises
                outputs.append(self._append(req, tok, lp))
            except Exception as e:
                log.exception("request %s: processing token %d failed; ending this request", req.request_id, tok)
                outputs.append(self.fail_request(req, _engine_error("processing its output", e), token_ids=[tok]))
        return outputs

    def _append(self, req: Request, token: int, logprobs: TokenLogprobs | None) -> RequestOutput:
        req.output_token_ids.append(token)
        self._counters["generated"] += 1
        if req.first_token_time is None:
            req.first_token_time = time.monotonic()
        out = RequestOutput(req.request_id, token_ids=[token], logprobs=[logprobs] if logprobs else None,
                            scheduled=req.first_scheduled_time)
        try:
            grammar_done = req.steering.advance(token)
        except ValueError as e:  # the grammar refused a token it had allowed: end this request only
            log.error("request %s: grammar state error: %s", req.request_id, e)
            self.scheduler.finish(req, RequestStatus.FINISHED_ERROR)
            out = self._finish_output(req, out)
            out.error = "the output grammar could not continue; see the server log"
            return out
        out.text, finish = self._stops[req.request_id].add(
            token, num_output_tokens=len(req.output_token_ids), num_tokens=req.num_tokens, grammar_done=grammar_done
        )
        if finish is None:
            return out
        req.stop_reason = finish.stop_reason
        self.scheduler.finish(req, finish.status)
        return self._finish_output(req, out)

    def _finish_output(self, req: Request, out: RequestOutput) -> RequestOutput:
        out.finished = True
        out.finish_reason = req.finish_reason
        out.stop_reason = req.stop_reason
        out.usage = Usage(req.num_prompt_tokens, len(req.output_token_ids), req.num_cached_tokens)
        out.timing = RequestTiming(req.arrival_time, req.first_token_time, time.monotonic())
        out.scheduled = req.first_scheduled_time
        # pop: a request whose own work raised half-way through finishing is finished again
        self.requests.pop(req.request_id, None)
        self._stops.pop(req.request_id, None)
        self.speculator.forget(req.request_id)
        return out

    def fail_request(
        self, req: Request, message: str, *, client: bool = False, token_ids: list[int] | None = None
    ) -> RequestOutput:
        """End one request with an error, wherever it got to; `client` when its own parameters caused it."""
        self.scheduler.finish(req, RequestStatus.FINISHED_ERROR)
        out = self._finish_output(req, RequestOutput(req.request_id, token_ids=token_ids or []))
        out.error = message
        out.error_is_client = client
        return out

    def fail_all(self, message: str) -> list[RequestOutput]:
        """After an unexpected engine error: end every request with an error."""
        outs = []
        for rid in list(self.requests):
            out = self.abort(rid, RequestStatus.FINISHED_ERROR)
            if out is not None:
                out.error = message
                outs.append(out)
        return outs

    def reset_prefix_cache(self) -> int:
        return self.pool.reset_prefix_cache()

    def stats(self) -> EngineStats:
        c, s = self._counters, self.pool.stats
        return EngineStats(
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting),
            max_running=self.config.parallel, kv_blocks_total=self.pool.num_blocks,
            kv_blocks_used=self.pool.num_used, block_size=self.pool.block_size,
            prefix_cache_queries=s.queries, prefix_cache_hits=s.hits,
            prompt_tokens_total=c["prompt"], tokens_computed_total=c["computed"],
            generation_tokens_total=c["generated"], preemptions=self.scheduler.num_preemptions, steps=c["steps"],
            draft_tokens=self.speculator.drafted_total, accepted_draft_tokens=self.speculator.accepted_total,
            slots=[
                SlotState(r.slot, r.request_id, r.num_prompt_tokens, len(r.output_token_ids), r.num_computed_tokens,
                          r.num_cached_tokens, r.params.max_tokens, r.priority.name.lower())
                for r in sorted(self.scheduler.running, key=lambda r: r.slot)
            ],
        )
