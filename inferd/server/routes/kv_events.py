"""GET /v1/kv-events: this worker's prefix-cache blocks as a stream, for
routers that place prompts where their prefix is cached.

NDJSON, one object per line:
  {"type":"snapshot","block_size":16,"hashes":[...],"active_blocks":N}   first, once
  {"type":"update","stored":[...],"removed":[...],"active_blocks":N}    per engine step that changed
  {"type":"ping","active_blocks":N}                                     after PING_SECONDS of silence
Hashes are `inferd.prefix_hash` block hashes (32 hex digits). The stream ends when
the client leaves, when it falls too far behind, or when the server drains;
a reader then reconnects and starts over from a fresh snapshot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from inferd.engine.kv_events import KvSubscription
from inferd.http.errors import ServiceUnavailable
from inferd.serving.state import ServerState, get_state

router = APIRouter()

PING_SECONDS = 5.0  # silence before a ping: proxies keep the line, readers notice dead peers
MEDIA_TYPE = "application/x-ndjson"


def ndjson(event: dict) -> str:
    return json.dumps(event, separators=(",", ":")) + "\n"


async def event_lines(sub: KvSubscription, ping_seconds: float = PING_SECONDS) -> AsyncIterator[str]:
    """The snapshot, then updates and pings until the subscription ends."""
    try:
        snap = sub.snapshot
        yield ndjson({"type": "snapshot", "block_size": snap.block_size, "hashes": snap.hashes,
                      "active_blocks": snap.active_blocks})
        while True:
            try:
                update = await asyncio.wait_for(sub.next(), ping_seconds)
            except asyncio.TimeoutError:
                yield ndjson({"type": "ping", "active_blocks": sub.active_blocks})
                continue
            if update is None:
                return
            yield ndjson({"type": "update", "stored": update.stored, "removed": update.removed,
                          "active_blocks": update.active_blocks})
    finally:
        sub.close()


@router.get("/v1/kv-events")
async def kv_events(state: ServerState = Depends(get_state)):
    engine = state.require_engine()
    if state.draining:
        raise ServiceUnavailable("the server is draining", code="draining")
    sub = await engine.subscribe_kv_events()
    return StreamingResponse(event_lines(sub), media_type=MEDIA_TYPE,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
