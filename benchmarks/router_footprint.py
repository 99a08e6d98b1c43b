"""`inferd router`'s footprint: seconds from start to the first /health answer,
and its resident memory then, over several starts (median, min, max).

    python benchmarks/router_footprint.py [--runs 5] [--source DIR]

`--source` runs the router from another checkout (e.g. a `git worktree` of an
older commit), to compare two versions on the same machine in one sitting.
The router holds no weights, so both figures are the cost of what it imports.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def one_start(source: Path) -> tuple[float, float]:
    port = free_port()
    argv = [sys.executable, "-m", "inferd.cli", "router", "--port", str(port), "--worker", "http://127.0.0.1:9",
            "--health-interval", "0"]
    env = {**os.environ, "PYTHONPATH": str(source)}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise RuntimeError(f"the router exited with {proc.returncode}") from None
                time.sleep(0.02)
        return time.perf_counter() - start, rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    runs = [one_start(args.source.resolve()) for _ in range(args.runs)]
    for name, values in (("start to /health (s)", [r[0] for r in runs]), ("RSS (MB)", [r[1] for r in runs])):
        print(f"{name:<22} median {statistics.median(values):7.2f}  min {min(values):7.2f}  max {max(values):7.2f}")


if __name__ == "__main__":
    main()
