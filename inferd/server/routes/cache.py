"""The KV cache for operators: its occupancy and prefix-cache hits, and a
reset that forgets every cached prefix (after a template or weight change,
or to measure cold prompts)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from inferd.engine.engine import Engine
from inferd.serving.state import ServerState, get_state

router = APIRouter()


class CacheStats(BaseModel):
    kv_blocks_total: int
    kv_blocks_used: int
    block_size: int  # tokens per block
    kv_usage: float  # kv_blocks_used / kv_blocks_total
    prefix_cache_queries: int  # prompt blocks looked up
    prefix_cache_hits: int  # of which found cached
    prefix_cache_hit_rate: float


class CacheReset(BaseModel):
    dropped_blocks: int  # cached blocks forgotten; blocks of running requests stay


@router.get("/v1/cache/stats", response_model=CacheStats)
async def cache_stats(state: ServerState = Depends(get_state)):
    stats = state.require_engine().stats()
    return CacheStats(
        kv_blocks_total=stats.kv_blocks_total, kv_blocks_used=stats.kv_blocks_used, block_size=stats.block_size,
        kv_usage=stats.kv_usage, prefix_cache_queries=stats.prefix_cache_queries,
        prefix_cache_hits=stats.prefix_cache_hits, prefix_cache_hit_rate=stats.prefix_cache_hit_rate,
    )


@router.post("/v1/cache/reset", response_model=CacheReset)
async def cache_reset(state: ServerState = Depends(get_state)):
    # On the engine thread, between steps: the pool is never touched mid-step.
    dropped = await state.require_engine().call(Engine.reset_prefix_cache)
    return CacheReset(dropped_blocks=dropped)
