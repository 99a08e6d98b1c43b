"""GET /slots: what each of the --parallel slots is doing, from the engine's
latest step snapshot (reading it never waits for the engine)."""

from __future__ import annotations

from inferd.api.llamacpp.slot_actions import NotSupported
from inferd.engine.outputs import SlotState
from inferd.serving.state import ServerState


def _busy(slot: SlotState, n_ctx: int, speculative: bool) -> dict:
    n_predict = -1 if slot.max_tokens is None else slot.max_tokens
    remaining = -1 if slot.max_tokens is None else slot.max_tokens - slot.generated_tokens
    return {
        "id": slot.slot,
        "id_task": slot.request_id,
        "n_ctx": n_ctx,
        "speculative": speculative,
        "is_processing": True,
        "n_prompt_tokens": slot.prompt_tokens,
        "n_prompt_tokens_processed": max(min(slot.computed_tokens, slot.prompt_tokens) - slot.cached_tokens, 0),
        "n_prompt_tokens_cache": slot.cached_tokens,
        "params": {"n_predict": n_predict},
        "next_token": {"has_next_token": True, "n_remain": remaining, "n_decoded": slot.generated_tokens},
    }


def _idle(slot_id: int, n_ctx: int, speculative: bool) -> dict:
    return {
        "id": slot_id,
        "id_task": -1,
        "n_ctx": n_ctx,
        "speculative": speculative,
        "is_processing": False,
        "n_prompt_tokens": 0,
        "n_prompt_tokens_processed": 0,
        "n_prompt_tokens_cache": 0,
        "params": {"n_predict": -1},
        "next_token": {"has_next_token": False, "n_remain": -1, "n_decoded": 0},
    }


def slots(state: ServerState) -> list[dict]:
    if not state.config.slots:
        raise NotSupported("This server does not support slots endpoint: it was started with --no-slots; "
                           "restart it without --no-slots to enable /slots", code=501)
    engine = state.require_engine()
    stats = engine.stats()
    n_ctx = engine.engine.max_model_len
    speculative = engine.engine.speculator.enabled  # drafts are verified on this model (greedy requests)
    running = {s.slot: s for s in stats.slots}
    return [_busy(running[i], n_ctx, speculative) if i in running else _idle(i, n_ctx, speculative)
            for i in range(stats.max_running)]
