"""What the event loop spends on each streamed token, piece by piece.

    python benchmarks/stream_costs.py [--events 20000]

- keep-alive: a stream of events through `guard_stream` alone, through
  `with_keepalive` (http/keepalive.py), and through the simple way it
  replaced (a task and a timed `asyncio.wait` per event), on uvloop;
- a completion chunk: the pydantic response validated and dumped whole,
  against `ChunkFrame` (the envelope serialized once, the choice per token).

Prints µs per event; run it twice, the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import uvloop

from inferd.api.openai.protocol import CompletionChoice, CompletionResponse
from inferd.http.keepalive import with_keepalive
from inferd.http.sse import ChunkFrame, guard_stream, sse


async def task_per_event(events, interval: float = 15.0):
    """The simple way: each next event awaited in a task of its own, with a timeout."""
    iterator = events.__aiter__()
    pending = asyncio.ensure_future(iterator.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            yield event
            pending = asyncio.ensure_future(iterator.__anext__())
    finally:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)


async def source(count: int):
    """Events that each arrive through a queue, as an engine's outputs do."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()
    for i in range(count):
        loop.call_soon(queue.put_nowait, i)
        yield f"data: {await queue.get()}\n\n"


async def keepalive_costs(count: int) -> dict[str, float]:
    ways = {"guard_stream alone": lambda s: s, "with_keepalive": with_keepalive,
            "a task per event": task_per_event}
    costs = {}
    for name, wrap in ways.items():
        start = time.perf_counter()
        async for _ in wrap(guard_stream(source(count))):
            pass
        costs[name] = (time.perf_counter() - start) / count * 1e6
    return costs


def chunk_costs(count: int) -> dict[str, float]:
    def whole():
        body = CompletionResponse(id="cmpl-1", created=1, model="gemma3", system_fingerprint="fp_1",
                                  choices=[CompletionChoice(index=0, text=" word")]).model_dump()
        del body["choices"][0]["stop_reason"], body["usage"]
        return sse(body)

    envelope = CompletionResponse(id="cmpl-1", created=1, model="gemma3", system_fingerprint="fp_1",
                                  choices=[]).model_dump()
    del envelope["usage"]
    frame = ChunkFrame(envelope)

    def framed():
        choice = CompletionChoice(index=0, text=" word").model_dump()
        del choice["stop_reason"]
        return frame.event([choice])

    assert whole() == framed()
    costs = {}
    for name, fn in {"whole chunk through pydantic": whole, "ChunkFrame": framed}.items():
        start = time.perf_counter()
        for _ in range(count):
            fn()
        costs[name] = (time.perf_counter() - start) / count * 1e6
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args()
    for name, us in {**uvloop.run(keepalive_costs(args.events)), **chunk_costs(args.events)}.items():
        print(f"{name:30} {us:6.1f} µs an event")


if __name__ == "__main__":
    main()
