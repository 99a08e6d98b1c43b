"""POST /api/pull: a model from the Hugging Face Hub into the store, its
progress streamed as Ollama streams a pull (NDJSON lines of status, digest,
total, completed), or one {"status": "success"} with `stream: false`.

The pull runs on a worker thread. Errors found before any byte moves (a bad
name, a repository or quantization that is not there, a full disk) answer
with their own status; later ones end the stream with an error line. A client
that leaves cancels the pull; what was downloaded stays for the next one.
"""

from __future__ import annotations

import asyncio
import json
import threading

from fastapi.responses import JSONResponse, StreamingResponse

from inferd.api.ollama.dialect import error_line
from inferd.api.ollama.protocol import PullRequest
from inferd.api.stored_models import as_api_error, parse_name, store_of
from inferd.http.errors import BadRequest
from inferd.model_store.pull import Progress, pull
from inferd.serving.state import ServerState

_DONE = object()


async def create_pull(state: ServerState, req: PullRequest):
    if not req.requested():
        raise BadRequest("model is required", param="model")
    name = parse_name(req.requested())
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    cancelled = threading.Event()

    def report(event: Progress) -> None:
        loop.call_soon_threadsafe(events.put_nowait, event)

    def work() -> None:
        try:
            pull(store_of(state), name.full, report, cancelled=cancelled.is_set)
        except Exception as error:  # handed to the answer, in the dialect's envelope
            loop.call_soon_threadsafe(events.put_nowait, error)
        finally:
            loop.call_soon_threadsafe(events.put_nowait, _DONE)

    threading.Thread(target=work, name="inferd-pull", daemon=True).start()
    # Held until the pull has chosen its files (streaming) or is done: errors until then get their own status.
    held = []
    try:
        while True:
            event = await events.get()
            if isinstance(event, Exception):
                raise as_api_error(event)
            held.append(event)
            if event is _DONE or (req.stream and event.status != "pulling manifest"):
                break
    except asyncio.CancelledError:  # the client left before the answer began
        cancelled.set()
        raise
    if not req.stream:
        return JSONResponse({"status": "success"})
    return StreamingResponse(_lines(held, events, cancelled), media_type="application/x-ndjson")


async def _lines(held: list, events: asyncio.Queue, cancelled: threading.Event):
    try:
        while True:
            event = held.pop(0) if held else await events.get()
            if event is _DONE:
                return
            if isinstance(event, Exception):
                yield error_line(as_api_error(event))
                return
            yield json.dumps(_wire(event)) + "\n"
    finally:
        cancelled.set()  # a no-op once the pull is done; stops it when the client left


def _wire(event: Progress) -> dict:
    body = {"status": event.status}
    if event.digest:
        body["digest"] = event.digest
    if event.total is not None:
        body.update(total=event.total, completed=event.completed or 0)
    return body
