"""GET /slots: what each of the --parallel slots is doing, from the engine's
latest step snapshot (reading it never waits for the engine)."""

from __future__ import annotations

from inferd.engine.outputs import SlotState
from inferd.http.errors import APIError, BadRequest
from inferd.serving.state import ServerState


class NotSupported(APIError):
    """An endpoint this server was started without (llama-server answers these 501)."""

    status, type = 501, "not_supported_error"


def _busy(slot: SlotState, n_ctx: int) -> dict:
    n_predict = -1 if slot.max_tokens is None else slot.max_tokens
    remaining = -1 if slot.max_tokens is None else slot.max_tokens - slot.generated_tokens
    return {
        "id": slot.slot,
        "id_task": slot.request_id,
        "n_ctx": n_ctx,
        "speculative": False,
        "is_processing": True,
        "n_prompt_tokens": slot.prompt_tokens,
        "n_prompt_tokens_processed": max(min(slot.computed_tokens, slot.prompt_tokens) - slot.cached_tokens, 0),
        "n_prompt_tokens_cache": slot.cached_tokens,
        "params": {"n_predict": n_predict},
        "next_token": {"has_next_token": True, "n_remain": remaining, "n_decoded": slot.generated_tokens},
    }


def _idle(slot_id: int, n_ctx: int) -> dict:
    return {
        "id": slot_id,
        "id_task": -1,
        "n_ctx": n_ctx,
        "speculative": False,
        "is_processing": False,
        "n_prompt_tokens": 0,
        "n_prompt_tokens_processed": 0,
        "n_prompt_tokens_cache": 0,
        "params": {"n_predict": -1},
        "next_token": {"has_next_token": False, "n_remain": -1, "n_decoded": 0},
    }


def slot_action(state: ServerState, slot_id: int, action: str | None) -> dict:
    """POST /slots/{id}?action=save|restore|erase. Slots here are engine sequences that
    free their KV when they finish (it stays in the prefix cache, shared by every slot),
    so there is no per-slot state to save, restore or erase: a 501, as llama-server
    answers when started without --slot-save-path."""
    if action not in ("save", "restore", "erase"):
        raise BadRequest(f"action must be save, restore or erase, got {action!r}", param="action")
    raise NotSupported(f"slot {action} is not supported by this server: a finished request's KV cache stays in the "
                       "prefix cache, which every slot shares, so resending the same prompt reuses it "
                       "(cache_prompt: true); POST /v1/cache/reset clears it", code=501)


def slots(state: ServerState) -> list[dict]:
    if not state.config.slots:
        raise NotSupported("This server does not support slots endpoint: it was started with --no-slots; "
                           "restart it without --no-slots to enable /slots", code=501)
    engine = state.require_engine()
    stats = engine.stats()
    n_ctx = engine.engine.max_model_len
    running = {s.slot: s for s in stats.slots}
    return [_busy(running[i], n_ctx) if i in running else _idle(i, n_ctx) for i in range(stats.max_running)]
