"""CPU the server's event loop spends per streamed token, and its other threads'.

    python benchmarks/loop_cpu.py [--runs 4] [--tree PATH]

Starts `inferd serve` (2 threads, 8 slots; `--tree`: another checkout's
inferd, e.g. a `git worktree` of an older commit), warms it with one run,
then reads each thread's CPU time (/proc/PID/task/TID/stat) around `--runs`
streamed 8-stream runs of `inferd bench` (100-token prompts, 128 tokens
each). On a host of few CPUs what the loop thread spends is taken from the
engine's compute threads. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from compare_llama_server import Server, free_port

TICKS = os.sysconf("SC_CLK_TCK")
WORKLOAD = ["--dataset", "random", "--num-prompts", "8", "--input-len", "100", "--output-len", "128",
            "--max-concurrency", "8"]


def thread_cpu(pid: int) -> dict[str, float]:
    """Seconds of CPU of each of the process's threads, by name and id."""
    seconds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        label = "event loop (main)" if int(task.name) == pid else f"{name}/{task.name}"
        seconds[label] = (int(fields[11]) + int(fields[12])) / TICKS
    return seconds


def bench(url: str, seed: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "inferd.cli", "bench", "--base-url", url, "--json", "--seed",
                           str(seed), *WORKLOAD], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--tree", default=None, help="the checkout whose inferd serves (default: this one)")
    args = parser.parse_args()
    port = free_port()
    # -P: the checkout on PYTHONPATH comes before the working directory and the installed one.
    server = Server("inferd", [sys.executable, "-P", "-m", "inferd.cli", "serve", "--port", str(port), "--threads",
                               "2", "--parallel", "8", "--ctx-size", "2048"], port,
                    env={"PYTHONPATH": args.tree} if args.tree else {})
    try:
        server.start()
        bench(server.url, seed=1)
        before = thread_cpu(server.proc.pid)
        tokens = 0
        for run in range(args.runs):
            summary = bench(server.url, seed=100 + run)
            tokens += summary["total_output_tokens"]
            print(f"run {run + 1}: {summary['output_token_throughput']:.1f} tok/s")
        after = thread_cpu(server.proc.pid)
    finally:
        server.stop()
    print(f"{tokens} streamed tokens; CPU per token of each thread that used any:")
    for thread, seconds in sorted(after.items(), key=lambda kv: -(kv[1] - before.get(kv[0], 0))):
        spent = seconds - before.get(thread, 0)
        if spent > 0:
            print(f"  {thread:28} {spent / tokens * 1e6:8.1f} µs")


if __name__ == "__main__":
    main()
