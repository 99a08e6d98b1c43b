"""How fast the console at /ui loads, with the server idle and with it busy
serving 8 streams, side by side in one run.

    python benchmarks/console_load.py [--loads 10] [--streams 8] [--threads 1]

One `inferd serve` of the bundled Gemma 3 270M (--parallel 8, --metrics).
Each load opens /ui/#dashboard in a fresh browser context (empty cache, as a
first visit) of Debian's chromium and reads two times the page itself
records, from the start of the navigation: the load event (the HTML, the
stylesheet and every script module), and the first /api/stats numbers drawn
on the dashboard (the `console:first-stats` mark). "Busy": 8 streamed chat
completions of up to 1500 tokens run the whole time, each restarted when it
ends, and the loads begin once tokens flow; /health is read before every load
to check that 8 are running. Beside them, the floor: the same files from
Python's own static file server (`python -m http.server`), load event only
(it has no API to draw numbers from).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

from browser import Browser  # noqa: E402
from server import ServerProcess  # noqa: E402

STREAM = {"messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
          "max_tokens": 1500, "stream": True, "temperature": 0.8}


class Streams:
    """`count` streamed chat completions, each restarted as soon as it ends, until stopped."""

    def __init__(self, base_url: str, count: int):
        self.base_url = base_url
        self.stopping = threading.Event()
        self.tokens = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=600) as client:
            while not self.stopping.is_set():
                with client.stream("POST", "/v1/chat/completions", json=STREAM) as r:
                    for line in r.iter_lines():
                        if self.stopping.is_set():
                            return
                        if line.startswith("data: {"):
                            self.tokens += 1

    def __enter__(self) -> Streams:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(30)


def generated(http: httpx.Client) -> int:
    """Tokens the server's engine has generated so far (its own counter, as /api/stats gives it)."""
    return sum(m["generation_tokens_total"] for m in http.get("/api/stats").json()["models"])


def load_once(browser: Browser, url: str, numbers: bool = True) -> tuple[float, float]:
    """(load event, first stats drawn), in ms from the navigation's start."""
    page = browser.page(1280)
    try:
        page.goto(url)
        if not numbers:
            return page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"), float("nan")
        deadline = time.monotonic() + 30
        while not page.evaluate("performance.getEntriesByName('console:first-stats').length"):
            if time.monotonic() > deadline:
                raise RuntimeError("the dashboard drew no numbers within 30 s")
            time.sleep(0.01)
        return page.evaluate("""[performance.getEntriesByType('navigation')[0].loadEventEnd,
                                 performance.getEntriesByName('console:first-stats')[0].startTime]""")
    finally:
        page.context.close()


def summary(values: list[float]) -> str:
    if any(v != v for v in values):  # NaN: not measured
        return f"{'–':>8}{'–':>8}{'–':>8}"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(values):>8.0f}{p90:>8.0f}{max(values):>8.0f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)  # more oversubscribes a shared machine (OpenMP spins)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="inferd-console-load-"))
    server = ServerProcess(None, parallel=args.streams, ctx_size=2048, threads=args.threads, metrics=True,
                           log_path=logs / "serve.log")
    server.start()
    url = f"{server.base_url}/ui/#dashboard"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        static_port = s.getsockname()[1]
    static = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(static_port),
                               "--directory", str(ROOT / "inferd" / "console" / "assets")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    busy = f"busy ({args.streams} streams)"
    rows: dict[str, list[tuple[float, float]]] = {"static files": [], "idle": [], busy: []}
    running = []
    try:
        with Browser.launch() as browser, httpx.Client(base_url=server.base_url, timeout=600) as http:
            http.post("/v1/chat/completions", json={**STREAM, "stream": False, "max_tokens": 8})  # warm-up
            load_once(browser, url)  # the first start of chromium's own caches, not counted
            for _ in range(args.loads):
                rows["static files"].append(load_once(browser, f"http://127.0.0.1:{static_port}/index.html", False))
                rows["idle"].append(load_once(browser, url))
            with Streams(server.base_url, args.streams) as streams:
                while http.get("/health").json()["running"] < args.streams or streams.tokens < 10 * args.streams:
                    time.sleep(0.1)
                started, tokens = time.monotonic(), generated(http)
                for _ in range(args.loads):
                    running.append(http.get("/health").json()["running"])
                    rows[busy].append(load_once(browser, url))
                rate = (generated(http) - tokens) / (time.monotonic() - started)
    finally:
        server.stop()
        static.terminate()
    print(f"{'server':<20}{'load event (ms)':>24}{'first numbers (ms)':>26}   n")
    print(f"{'':<20}{'median     p90     max':>24}{'median     p90     max':>26}")
    for name, values in rows.items():
        print(f"{name:<20}{summary([v[0] for v in values])}{summary([v[1] for v in values]):>26}   {len(values)}")
    print(f"busy: {min(running)}-{max(running)} streams running at each load, {rate:.0f} tokens/s generated in all")


if __name__ == "__main__":
    main()
