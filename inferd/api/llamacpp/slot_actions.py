"""POST /slots/{id}?action=save|restore|erase, in llama-server's shapes. The
work is `engine/slot_files.py`'s: the pool on the engine thread, the file on a
worker thread. Files live directly under --slot-save-path, named by the body.
As in llama-server, an action on a slot that is running a request waits until
that request ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inferd.engine.async_engine import AsyncEngine
from inferd.engine.slot_files import SlotFileError, erase, install, read_file, slot_busy, snapshot, write_file
from inferd.http.errors import APIError, BadRequest
from inferd.serving.state import ServerState

ACTIONS = ("save", "restore", "erase")
IDLE_POLL_SECONDS = 0.02
_NOT_IN_NAMES = set('/\\:*?"<>|')
MAX_NAME_BYTES = 255


class NotSupported(APIError):
    """An endpoint this server was started without (llama-server answers these 501)."""

    status, type = 501, "not_supported_error"


def checked_filename(filename: object) -> str:
    """A plain file name: no folder part, nothing a file system reads specially."""
    if not isinstance(filename, str) or not filename:
        raise BadRequest("Invalid filename: send the file's name as a non-empty string in the body's \"filename\"",
                         param="filename")
    why = None
    try:
        size = len(filename.encode("utf-8"))
    except UnicodeEncodeError:
        size, why = 0, "it is not valid Unicode"
    if why is None:
        if size > MAX_NAME_BYTES:
            why = f"it is {size} bytes long, the most is {MAX_NAME_BYTES}"
        elif any(c in _NOT_IN_NAMES or ord(c) < 32 or ord(c) == 127 for c in filename):
            why = 'it holds a path separator, a control character or one of : * ? " < > |'
        elif filename.startswith(".") or filename.endswith(".") or filename != filename.strip():
            why = "it starts with a dot, ends with a dot, or starts or ends with white space"
    if why is not None:
        raise BadRequest(f"Invalid filename {filename!r}: {why}; name a file directly under --slot-save-path",
                         param="filename")
    return filename


async def slot_action(state: ServerState, slot_id: int, action: str | None, body: dict | None) -> dict:
    if not state.config.slot_save_path:
        raise NotSupported("This server does not support slots action. Start it with `--slot-save-path`", code=501)
    if action not in ACTIONS:
        raise BadRequest(f"Invalid action: action must be save, restore or erase, got {action!r}", param="action")
    engine = state.require_engine()
    slots = engine.engine.config.parallel
    if not 0 <= slot_id < slots:
        raise BadRequest(f"Invalid slot ID {slot_id}: this server has slots 0 to {slots - 1} (--parallel {slots})",
                         param="id_slot")
    if action == "erase":
        return {"id_slot": slot_id, "n_erased": (await _when_idle(engine, slot_id, erase))[0]}
    filename = checked_filename((body or {}).get("filename"))
    path = Path(state.config.slot_save_path) / filename
    if action == "save":
        return await _save(engine, slot_id, filename, path)
    return await _restore(engine, slot_id, filename, path)


async def _when_idle(engine: AsyncEngine, slot: int, work) -> tuple[object, float]:
    """`work(engine, slot)` on the engine thread, once no request runs in `slot`: checked and
    done in one call, so no request can take the slot in between. Returns its result and
    when it started (perf_counter), so timings leave out the wait, as llama-server's do."""
    def attempt(e):
        started = time.perf_counter()
        return (False, None, started) if slot_busy(e, slot) else (True, work(e, slot), started)

    while True:
        idle, result, started = await engine.call(attempt)
        if idle:
            return result, started
        await asyncio.sleep(IDLE_POLL_SECONDS)


async def _save(engine: AsyncEngine, slot: int, filename: str, path: Path) -> dict:
    cache, started = await _when_idle(engine, slot, snapshot)
    try:
        written = await asyncio.to_thread(write_file, path, cache)
    except OSError as error:
        raise APIError(f"could not write the slot file {filename}: {error.strerror or error}") from None
    return {"id_slot": slot, "filename": filename, "n_saved": len(cache.token_ids), "n_written": written,
            "timings": {"save_ms": _ms_since(started)}}


async def _restore(engine: AsyncEngine, slot: int, filename: str, path: Path) -> dict:
    reading = time.perf_counter()
    try:
        cache, read = await asyncio.to_thread(read_file, path)
        read_seconds = time.perf_counter() - reading
        restored, started = await _when_idle(engine, slot, lambda e, s: install(e, s, cache))
    except SlotFileError as error:
        raise BadRequest(str(error), param="filename") from None
    return {"id_slot": slot, "filename": filename, "n_restored": restored, "n_read": read,
            "timings": {"restore_ms": read_seconds * 1000 + _ms_since(started)}}


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
