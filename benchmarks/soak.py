"""Soak: a bounded mixed workload against one `inferd serve` for N minutes,
then the checks that a long-lived server must pass.

    python benchmarks/soak.py [--minutes 5] [--concurrency 4] [--model M] [-- SERVER ARGS...]
    python benchmarks/soak.py --url http://127.0.0.1:8080 [--server-pid PID]

By default the script starts `inferd serve` itself (the bundled Gemma 3 270M
unless `--model` names another; arguments after `--` go to the server,
replacing the default `--ctx-size 512 --num-kv-blocks 128 --strict-model-names`:
a KV pool that the warm-up fills, since pages of a larger pool are first
touched, and counted, as sequences reach them; and an unknown model name
refused, which a one-model server otherwise answers with its model) on a free port with a throw-away
`--data-dir`, and stops it at the end. `--url`
targets a server that is already running; its RSS is sampled only when
`--server-pid` names its process.

`--concurrency` clients send small requests (8-32 tokens) over every dialect
(OpenAI chat and completions, Responses, Anthropic Messages, Ollama chat and
generate, llama-server /completion), streaming and not, until the time is up.
Each request is one of these kinds:

  complete          read to the end (a stored Response is then fetched, cancelled, deleted)
  first-chunk-drop  streaming; the client closes the connection after the first line
  mid-stream-abort  streaming; the client closes after a few lines, mid-generation
  timed-cancel      streaming or not; the client cancels after a random 0.05-1.5 s
  bad-input         a malformed body or an out-of-range parameter; a 4xx is expected

What it measures, and the target for each (a FAIL exits non-zero):

  5xx answers, and error events inside 200 streams             0
  requests left without an HTTP answer (dropped, timed out)    0
  answers of the wrong class (bad input not 4xx, good one 4xx) 0
  p99 latency of GET /health, polled every 100 ms from its own thread during the load   < 100 ms
  anonymous RSS drift of the server, idle to idle: after warm-up (the first 20% of the run)
    the clients pause until the server is idle, and again after the load   < 1%
    (RssAnon: file-backed pages, the mapped weights a new token's lookup touches, are
    the page cache of a bounded file; under load, in-flight activations come and go)
  requests still running or waiting once the server has settled (idle)        0
  KV blocks in use after POST /v1/cache/reset on the idle server               0
    (the reset frees cached prefix blocks; any block still held is a leak)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from inferd.bench.report import distribution
from inferd.bench.words import WORDS

HEALTH_POLL_SECONDS = 0.1
RSS_SAMPLE_SECONDS = 1.0
REQUEST_TIMEOUT = httpx.Timeout(120.0, connect=10.0)

HEALTH_P99_TARGET_MS = 100.0
RSS_DRIFT_TARGET = 0.01

KIND_WEIGHTS = {
    "complete": 0.50,
    "first-chunk-drop": 0.15,
    "mid-stream-abort": 0.10,
    "timed-cancel": 0.15,
    "bad-input": 0.10,
}
CANCEL_DELAY_RANGE_S = (0.05, 1.5)
ABORT_AFTER_LINES_RANGE = (2, 12)

# Statuses recorded when no HTTP answer was read.
CANCELLED = "cancelled"  # the client gave up on purpose (timed-cancel)
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection error"
UNANSWERED = (TIMEOUT, CONNECTION_ERROR)


# -- request shapes, one per generation route ---------------------------------
@dataclass(frozen=True)
class Params:
    """What varies between requests, in no dialect's spelling."""

    model: str
    system: str
    user: str
    max_tokens: int
    temperature: float
    stream: bool


@dataclass(frozen=True)
class Call:
    """One HTTP request to send: a JSON body, or raw bytes with a content type."""

    method: str
    path: str
    json_body: dict | None = None
    raw_body: bytes | None = None
    content_type: str = "application/json"
    stream: bool = False

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"


def chat_messages(p: Params) -> list[dict]:
    system = [{"role": "system", "content": p.system}] if p.system else []
    return [*system, {"role": "user", "content": p.user}]


def prompt_text(p: Params) -> str:
    return f"{p.system}\n\n{p.user}" if p.system else p.user


def openai_chat(p: Params) -> Call:
    return Call("POST", "/v1/chat/completions", {"model": p.model, "messages": chat_messages(p),
                                                 "max_tokens": p.max_tokens, "temperature": p.temperature,
                                                 "stream": p.stream}, stream=p.stream)


def openai_completion(p: Params) -> Call:
    return Call("POST", "/v1/completions", {"model": p.model, "prompt": prompt_text(p), "max_tokens": p.max_tokens,
                                            "temperature": p.temperature, "stream": p.stream}, stream=p.stream)


def responses(p: Params) -> Call:
    body = {"model": p.model, "input": p.user, "max_output_tokens": p.max_tokens, "temperature": p.temperature,
            "stream": p.stream}
    if p.system:
        body["instructions"] = p.system
    return Call("POST", "/v1/responses", body, stream=p.stream)


def anthropic_messages(p: Params) -> Call:
    body = {"model": p.model, "messages": [{"role": "user", "content": p.user}], "max_tokens": p.max_tokens,
            "temperature": p.temperature, "stream": p.stream}
    if p.system:
        body["system"] = p.system
    return Call("POST", "/v1/messages", body, stream=p.stream)


def ollama_chat(p: Params) -> Call:
    return Call("POST", "/api/chat", {"model": p.model, "messages": chat_messages(p), "stream": p.stream,
                                      "options": {"num_predict": p.max_tokens, "temperature": p.temperature}},
                stream=p.stream)


def ollama_generate(p: Params) -> Call:
    return Call("POST", "/api/generate", {"model": p.model, "prompt": prompt_text(p), "stream": p.stream,
                                          "options": {"num_predict": p.max_tokens, "temperature": p.temperature}},
                stream=p.stream)


def llama_completion(p: Params) -> Call:
    return Call("POST", "/completion", {"prompt": prompt_text(p), "n_predict": p.max_tokens,
                                        "temperature": p.temperature, "stream": p.stream}, stream=p.stream)


GENERATION_ROUTES: tuple[Callable[[Params], Call], ...] = (
    openai_chat, openai_completion, responses, anthropic_messages, ollama_chat, ollama_generate, llama_completion)


def bad_inputs(model: str) -> list[Call]:
    """Requests every server must refuse with a 4xx: malformed bodies and
    parameters beyond their documented ranges, across the dialects."""
    hi = [{"role": "user", "content": "hi"}]
    deep_json = b"[" * 100_000 + b"]" * 100_000
    return [
        Call("POST", "/v1/chat/completions", raw_body=b'{"messages": [{"role": "user", "content": "hi"}'),
        Call("POST", "/v1/chat/completions", raw_body=b"hi", content_type="text/plain"),
        Call("POST", "/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 100_000}),
        Call("POST", "/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 8, "temperature": -1}),
        Call("POST", "/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 8, "n": 1000}),
        Call("POST", "/v1/chat/completions", {"model": "no-such-model", "messages": hi, "max_tokens": 8}),
        Call("POST", "/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 8,
                                              "max_pattern_size": 10**12, "min_count": 2}),
        Call("POST", "/v1/chat/completions", {"model": model, "messages": hi, "max_tokens": 8,
                                              "chat_template_kwargs": {"messages": 1}}),
        Call("POST", "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 8, "logprobs": 99}),
        Call("POST", "/v1/responses", {"model": model, "input": "hi", "max_output_tokens": 8, "temperature": 5}),
        Call("POST", "/v1/messages", {"model": model, "messages": [], "max_tokens": 8}),
        Call("POST", "/v1/messages", {"model": model, "messages": hi, "max_tokens": 0}),
        Call("POST", "/api/chat", raw_body=b"not json"),
        Call("POST", "/api/generate", raw_body=b'{"model": "m", "prompt": "\xff\xfe"}'),
        Call("POST", "/api/generate", {"model": model, "prompt": 5}),
        Call("POST", "/api/chat", raw_body=deep_json),
        Call("POST", "/completion", {"prompt": "hi", "n_predict": 8, "n_probs": 500}),
    ]


# -- what came back ------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    route: str
    kind: str
    status: str  # the HTTP status code, or CANCELLED / TIMEOUT / CONNECTION_ERROR
    seconds: float
    stream_error: bool = False  # an error event inside a 200 stream
    body: dict | None = None  # a complete non-streaming JSON answer


ERROR_EVENTS = frozenset({"error", "response.failed"})


def is_error_event(line: str) -> bool:
    """Whether one SSE or NDJSON line reports an error: `event: error`, or a
    JSON object with a non-null top-level `error` or an error `type`."""
    if line.startswith("event:"):
        return line[len("event:"):].strip() in ERROR_EVENTS
    payload = line[len("data:"):].strip() if line.startswith("data:") else line.strip()
    if not payload.startswith("{"):
        return False
    try:
        event = json.loads(payload)
    except ValueError:
        return False
    return isinstance(event, dict) and (event.get("error") is not None or event.get("type") in ERROR_EVENTS)


def request_args(call: Call) -> dict:
    if call.raw_body is None and call.json_body is None:
        return {"method": call.method, "url": call.path}
    content = call.raw_body if call.raw_body is not None else json.dumps(call.json_body).encode()
    return {"method": call.method, "url": call.path, "content": content,
            "headers": {"Content-Type": call.content_type}}


async def send(client: httpx.AsyncClient, call: Call, kind: str, max_lines: int | None = None) -> Outcome:
    """Send `call`; read a streaming answer line by line, closing the
    connection after `max_lines` lines when given, or the whole body."""
    started = time.perf_counter()
    try:
        async with client.stream(**request_args(call)) as response:
            if not call.stream or response.status_code != 200:
                body = await response.aread()
                return Outcome(call.route, kind, str(response.status_code), time.perf_counter() - started,
                               body=json_object(body))
            stream_error, lines = False, 0
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                stream_error |= is_error_event(line)
                lines += 1
                if max_lines is not None and lines >= max_lines:
                    break  # leaving the block closes the connection mid-stream
            return Outcome(call.route, kind, "200", time.perf_counter() - started, stream_error=stream_error)
    except httpx.TimeoutException:
        return Outcome(call.route, kind, TIMEOUT, time.perf_counter() - started)
    except httpx.TransportError:
        return Outcome(call.route, kind, CONNECTION_ERROR, time.perf_counter() - started)


def json_object(body: bytes) -> dict | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


async def send_then_cancel(client: httpx.AsyncClient, call: Call, delay: float) -> Outcome:
    """Send `call` and give up after `delay` seconds, closing the connection
    whatever the server was doing; an answer that came first is kept."""
    started = time.perf_counter()
    try:
        return await asyncio.wait_for(send(client, call, "timed-cancel"), delay)
    except asyncio.TimeoutError:
        return Outcome(call.route, "timed-cancel", CANCELLED, time.perf_counter() - started)


async def stored_response_lifecycle(client: httpx.AsyncClient, response_id: str) -> list[Outcome]:
    """Fetch, cancel and delete a stored Response."""
    path = f"/v1/responses/{response_id}"
    calls = [Call("GET", path), Call("POST", f"{path}/cancel"), Call("DELETE", path)]
    outcomes = []
    for call in calls:
        outcome = await send(client, call, "complete")
        outcomes.append(Outcome(call.route.replace(response_id, "{id}"), outcome.kind, outcome.status,
                                outcome.seconds))
    return outcomes


# -- the workload ----------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """How big requests are: words of the shared system prompts and of the
    user's text, and tokens to generate (ranges are inclusive)."""

    system_words: int = 40
    user_words: tuple[int, int] = (3, 40)
    max_tokens: tuple[int, int] = (8, 32)


class Workload:
    """One client's stream of requests: which route, kind, prompt and length."""

    def __init__(self, model: str, rng: random.Random, shape: Shape):
        self.model, self.rng, self.shape = model, rng, shape
        self.bad = bad_inputs(model)
        # A few shared system prompts, so the prefix cache fills and is reused.
        self.system_prompts = [self.words(shape.system_words) for _ in range(4)]

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def params(self, stream: bool) -> Params:
        system = self.rng.choice(self.system_prompts) if self.rng.random() < 0.4 else ""
        return Params(model=self.model, system=system, user=self.words(self.rng.randint(*self.shape.user_words)),
                      max_tokens=self.rng.randint(*self.shape.max_tokens), temperature=round(self.rng.uniform(0.0, 1.0), 2),
                      stream=stream)

    def generation_call(self, stream: bool) -> Call:
        return self.rng.choice(GENERATION_ROUTES)(self.params(stream))

    def pick_kind(self) -> str:
        return self.rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]

    async def one_request(self, client: httpx.AsyncClient) -> list[Outcome]:
        kind = self.pick_kind()
        if kind == "bad-input":
            return [await send(client, self.rng.choice(self.bad), kind)]
        if kind == "first-chunk-drop":
            return [await send(client, self.generation_call(stream=True), kind, max_lines=1)]
        if kind == "mid-stream-abort":
            return [await send(client, self.generation_call(stream=True), kind,
                               max_lines=self.rng.randint(*ABORT_AFTER_LINES_RANGE))]
        stream = self.rng.random() < 0.5
        if kind == "timed-cancel":
            delay = self.rng.uniform(*CANCEL_DELAY_RANGE_S)
            return [await send_then_cancel(client, self.generation_call(stream), delay)]
        outcome = await send(client, self.generation_call(stream), kind)
        if outcome.route == "POST /v1/responses" and outcome.status == "200" and outcome.body:
            return [outcome, *await stored_response_lifecycle(client, outcome.body["id"])]
        return [outcome]


async def run_load(url: str, model: str, seconds: float, concurrency: int, seed: int, shape: Shape) -> list[Outcome]:
    """`concurrency` clients send requests back to back until `seconds` have
    passed; each finishes the request it is in."""
    deadline = time.monotonic() + seconds
    outcomes: list[Outcome] = []

    async def client_loop(workload: Workload, client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            outcomes.extend(await workload.one_request(client))

    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        await asyncio.gather(*(client_loop(Workload(model, random.Random(seed * 1000 + i), shape), client)
                               for i in range(concurrency)))
    return outcomes


# -- watching the server from its own thread --------------------------------------
@dataclass(frozen=True)
class HealthPoll:
    at: float  # seconds since the load started
    seconds: float
    status: str


@dataclass(frozen=True)
class RssSample:
    at: float
    kib: int


def read_rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


@dataclass(frozen=True)
class IdleMemory:
    """The server's anonymous RSS when idle after warm-up, and when idle after the load."""
    warm_kib: int
    end_kib: int

    @property
    def drift(self) -> float:
        return (self.end_kib - self.warm_kib) / self.warm_kib


class ServerWatch(threading.Thread):
    """Polls GET /health every 100 ms and samples the server's RSS every
    second, on a thread of its own, so the load's event loop does not delay it."""

    def __init__(self, url: str, pid: int | None, started: float):
        super().__init__(daemon=True)
        self.url, self.pid, self.started = url, pid, started
        self.health: list[HealthPoll] = []
        self.rss: list[RssSample] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        next_rss = 0.0
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while not self.stopped.is_set():
                tick = time.monotonic()
                self.health.append(self.poll_health(client))
                if self.pid is not None and tick - self.started >= next_rss:
                    self.sample_rss(tick - self.started)
                    next_rss += RSS_SAMPLE_SECONDS
                self.stopped.wait(max(0.0, HEALTH_POLL_SECONDS - (time.monotonic() - tick)))

    def sample_rss(self, at: float) -> None:
        try:
            self.rss.append(RssSample(at, read_rss_kib(self.pid)))
        except OSError:  # the process is gone; the health polls say so
            self.pid = None

    def poll_health(self, client: httpx.Client) -> HealthPoll:
        at = time.monotonic() - self.started
        start = time.perf_counter()
        try:
            status = str(client.get("/health").status_code)
        except httpx.HTTPError as e:
            status = type(e).__name__
        return HealthPoll(at, time.perf_counter() - start, status)

    def stop(self) -> None:
        self.stopped.set()
        self.join()


# -- the idle server: slots and blocks left behind ---------------------------------
@dataclass(frozen=True)
class Leftovers:
    running: int
    waiting: int
    settle_seconds: float  # how long it took /health to show both at 0 (or the whole grace)
    kv_blocks_used: int  # after POST /v1/cache/reset
    dropped_blocks: int  # cached blocks the reset freed


async def until_idle(url: str, grace_seconds: float) -> dict:
    """/health once nothing runs or waits, or when the grace time is up."""
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        started = time.monotonic()
        while True:
            health = (await client.get("/health")).json()
            if health["running"] == 0 and health["waiting"] == 0 or time.monotonic() - started >= grace_seconds:
                return health
            await asyncio.sleep(HEALTH_POLL_SECONDS)


async def leftovers(url: str, grace_seconds: float) -> Leftovers:
    started = time.monotonic()
    health = await until_idle(url, grace_seconds)
    settle = time.monotonic() - started
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        reset = (await client.post("/v1/cache/reset")).json()
        stats = (await client.get("/v1/cache/stats")).json()
    return Leftovers(health["running"], health["waiting"], settle, stats["kv_blocks_used"], reset["dropped_blocks"])


# -- the report --------------------------------------------------------------------
def requests_by_route_and_status(outcomes: list[Outcome]) -> Counter:
    return Counter((o.route, o.status) for o in outcomes)


def is_server_error(o: Outcome) -> bool:
    return o.status.startswith("5") or o.stream_error


def is_wrong_class(o: Outcome) -> bool:
    """A bad input answered other than 4xx, or a well-formed request refused
    with one. 5xx and requests with no answer are counted on their own."""
    if not o.status.isdigit() or o.status.startswith("5"):
        return False
    refused = o.status.startswith("4")
    return refused != (o.kind == "bad-input")


def rss_at(samples: list[RssSample], at: float) -> RssSample:
    """The last sample taken at or before `at` (the first one if none was)."""
    before = [s for s in samples if s.at <= at]
    return before[-1] if before else samples[0]


def rss_trajectory(samples: list[RssSample], load_end: float, points: int = 6) -> list[RssSample]:
    """RSS at `points` evenly spaced moments of the load, its start and end included."""
    return [rss_at(samples, load_end * i / (points - 1)) for i in range(points)]


@dataclass(frozen=True)
class Target:
    name: str
    value: str
    goal: str
    passed: bool | None  # None: not measured


def evaluate(outcomes: list[Outcome], health: list[HealthPoll], memory: IdleMemory | None, load_end: float,
             left: Leftovers) -> list[Target]:
    p99 = distribution([p.seconds for p in health if p.at <= load_end])["p99_ms"]
    targets = [
        Target("5xx answers and in-stream errors", str(sum(map(is_server_error, outcomes))), "0",
               not any(map(is_server_error, outcomes))),
        Target("requests without an answer", str(sum(o.status in UNANSWERED for o in outcomes)), "0",
               not any(o.status in UNANSWERED for o in outcomes)),
        Target("answers of the wrong class", str(sum(map(is_wrong_class, outcomes))), "0",
               not any(map(is_wrong_class, outcomes))),
        Target("/health p99 during the load", f"{p99:.1f} ms", f"< {HEALTH_P99_TARGET_MS:.0f} ms",
               bool(health) and p99 < HEALTH_P99_TARGET_MS),
    ]
    if memory is not None:
        targets.append(Target("RSS drift after warm-up", f"{memory.drift:+.2%} ({memory.warm_kib / 1024:.1f} -> "
                              f"{memory.end_kib / 1024:.1f} MB anon)", f"< {RSS_DRIFT_TARGET:.0%}",
                              memory.drift < RSS_DRIFT_TARGET))
    else:
        targets.append(Target("RSS drift after warm-up", "not measured (no server pid)",
                              f"< {RSS_DRIFT_TARGET:.0%}", None))
    targets += [
        Target("requests running / waiting when idle", f"{left.running} / {left.waiting}", "0 / 0",
               left.running == 0 and left.waiting == 0),
        Target("KV blocks used after cache reset", str(left.kv_blocks_used), "0", left.kv_blocks_used == 0),
    ]
    return targets


def verdict(passed: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "SKIP"}[passed]


def format_report(outcomes: list[Outcome], health: list[HealthPoll], rss: list[RssSample], load_seconds: float,
                  left: Leftovers, targets: list[Target]) -> str:
    lines = [f"{'route':<38} {'status':<17} {'count':>6}"]
    for (route, status), count in sorted(requests_by_route_and_status(outcomes).items()):
        lines.append(f"{route:<38} {status:<17} {count:>6}")
    kinds = Counter(o.kind for o in outcomes)
    lines += [
        "",
        f"{len(outcomes)} requests in {load_seconds:.1f} s ({len(outcomes) / load_seconds:.1f}/s): "
        + ", ".join(f"{kind} {kinds[kind]}" for kind in KIND_WEIGHTS),
        f"/health polls during the load: {len(health)}, "
        + ", ".join(f"{status} {n}" for status, n in sorted(Counter(p.status for p in health).items())),
        f"idle after {left.settle_seconds:.1f} s; the cache reset freed {left.dropped_blocks} cached blocks",
    ]
    if rss:
        lines.append("server RSS (MB) at 0, 20, 40, 60, 80, 100% of the load: "
                     + ", ".join(f"{s.kib / 1024:.1f}" for s in rss_trajectory(rss, load_seconds)))
    lines += [
        "",
        f"{'target':<38} {'value':<32} {'goal':<10} result",
    ]
    lines += [f"{t.name:<38} {t.value:<32} {t.goal:<10} {verdict(t.passed)}" for t in targets]
    return "\n".join(lines)


# -- the server under test ---------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """`inferd serve` in a child process on a free port, with a throw-away data folder."""

    def __init__(self, model: str | None, extra_args: list[str]):
        self.port = free_port()
        self.data_dir = tempfile.TemporaryDirectory(prefix="inferd-soak-")
        self.log_path = Path(self.data_dir.name) / "server.log"
        model_args = ["--model", model] if model else []
        self.argv = [sys.executable, "-m", "inferd.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                     "--data-dir", self.data_dir.name, *model_args, *extra_args]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 300.0) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"inferd serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"inferd serve not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.data_dir.cleanup()


# -- one soak ------------------------------------------------------------------------
@dataclass(frozen=True)
class SoakResult:
    targets: list[Target]
    report: str

    @property
    def passed(self) -> bool:
        return all(t.passed is not False for t in self.targets)


def soak(url: str, pid: int | None, seconds: float, concurrency: int, seed: int = 0,
         warmup_fraction: float = 0.2, settle_grace: float = 15.0, shape: Shape = Shape()) -> SoakResult:
    """Run the load against the server at `url`, then check it once idle."""
    model = httpx.get(f"{url}/health", timeout=10.0).json()["model"]
    started = time.monotonic()
    watch = ServerWatch(url, pid, started)
    watch.start()
    try:
        outcomes = asyncio.run(run_load(url, model, seconds * warmup_fraction, concurrency, seed, shape))
        asyncio.run(until_idle(url, settle_grace))
        warm_anon = read_rss_kib(pid, "RssAnon") if pid is not None else None
        outcomes += asyncio.run(run_load(url, model, seconds * (1 - warmup_fraction), concurrency, seed + 1, shape))
        load_end = time.monotonic() - started
        if pid is not None:
            watch.rss.append(RssSample(load_end, read_rss_kib(pid)))
    finally:
        watch.stop()
    left = asyncio.run(leftovers(url, settle_grace))
    memory = IdleMemory(warm_anon, read_rss_kib(pid, "RssAnon")) if warm_anon is not None else None
    targets = evaluate(outcomes, watch.health, memory, load_end, left)
    return SoakResult(targets, format_report(outcomes, watch.health, watch.rss, load_end, left, targets))


# A KV pool the warm-up fills: the RSS drift then measures what the load leaves behind.
DEFAULT_SERVER_ARGS = ["--ctx-size", "512", "--num-kv-blocks", "128", "--strict-model-names"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="arguments after -- go to `inferd serve`")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the load (default: 5)")
    parser.add_argument("--concurrency", type=int, default=4, help="clients sending at once (default: 4)")
    parser.add_argument("--url", help="soak a running server instead of starting one")
    parser.add_argument("--server-pid", type=int, help="with --url: the server's process, to sample its RSS")
    parser.add_argument("--model", help="model for the server this script starts (default: the bundled one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup-fraction", type=float, default=0.2,
                        help="share of the run before the RSS baseline is taken (default: 0.2)")
    parser.add_argument("server_args", nargs="*", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.server_pid
    else:
        server = LocalServer(args.model, args.server_args or DEFAULT_SERVER_ARGS)
        print(f"starting: {' '.join(server.argv)}", file=sys.stderr)
        server.start()
        url, pid = server.url, server.proc.pid
    try:
        print(f"soaking {url} for {args.minutes:g} min with {args.concurrency} clients", file=sys.stderr)
        result = soak(url, pid, args.minutes * 60, args.concurrency, args.seed, args.warmup_fraction)
    except Exception:
        if server is not None:
            print(f"the server's log ends:\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        if server is not None:
            server.stop()
    print(result.report)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
