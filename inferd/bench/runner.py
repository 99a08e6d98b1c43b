"""Sessions sent at Poisson-distributed start times, at most --max-concurrency
requests in flight, with a progress line on stderr."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, TextIO

from inferd.bench.client import RequestResult
from inferd.bench.datasets import Session

# (prompt, max_tokens) -> the timed result of one request
SendFn = Callable[[str, int], Awaitable[RequestResult]]


def arrival_gaps(count: int, request_rate: float, seed: int) -> list[float]:
    """Seconds to wait before each session starts: exponential gaps (a Poisson process), or none for inf."""
    if math.isinf(request_rate):
        return [0.0] * count
    rng = random.Random(seed)
    return [rng.expovariate(request_rate) for _ in range(count)]


@dataclass
class RunResult:
    results: list[RequestResult]
    duration: float  # seconds from the first send to the last answer


class Progress:
    def __init__(self, total: int, out: TextIO | None):
        self.total, self.done, self.failed, self.out = total, 0, 0, out

    def record(self, result: RequestResult) -> None:
        self.done += 1
        self.failed += not result.ok
        if self.out is not None:
            end = "\n" if self.done == self.total else ""
            self.out.write(f"\rrequests {self.done}/{self.total}  failed {self.failed}{end}")
            self.out.flush()


async def run_sessions(sessions: list[Session], send: SendFn, request_rate: float, max_concurrency: int | None,
                       seed: int, progress_out: TextIO | None = None) -> RunResult:
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    progress = Progress(sum(len(s.turns) for s in sessions), progress_out)
    results: list[RequestResult] = []

    async def one_request(prompt: str, max_tokens: int) -> RequestResult:
        if limit is None:
            return await send(prompt, max_tokens)
        async with limit:
            return await send(prompt, max_tokens)

    async def one_session(session: Session) -> None:
        answers: list[str] = []
        for turn in range(len(session.turns)):
            result = await one_request(session.prompt(turn, answers), session.output_len)
            results.append(result)
            progress.record(result)
            if not result.ok:
                return  # later turns would replay a history the server never produced
            answers.append(result.text)

    start = time.perf_counter()
    tasks = []
    for session, gap in zip(sessions, arrival_gaps(len(sessions), request_rate, seed)):
        if gap:
            await asyncio.sleep(gap)
        tasks.append(asyncio.create_task(one_session(session)))
    await asyncio.gather(*tasks)
    return RunResult(results, time.perf_counter() - start)
