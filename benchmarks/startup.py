"""Warm start: `inferd serve` with the bundled model, process start to
/health 200, with the weight and tokenizer caches already written; and to
the answer of a one-token completion sent as soon as /health answers, so
that work a server leaves for after /health is counted too.

    python benchmarks/startup.py [--rounds 5] [--baseline /path/to/other/tree] [-- serve options]

With `--baseline`, each round starts the server from this tree and from the
other one (a `git worktree` of an older commit), alternating which goes
first, so a loaded host slows both alike; the ratio of the medians is the
figure to compare. One unmeasured start per tree first writes its caches,
its Python bytecode included: each tree's goes to a folder of its own
(PYTHONPYCACHEPREFIX), written even where PYTHONDONTWRITEBYTECODE is set, as
an installed package has it (compiling inferd's sources took ~0.15 s of each
start on a host that writes none). Prints the CPU's instruction sets and the
host's load beside the figures.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_BYTECODE_DIRS: dict[Path, str] = {}


def bytecode_env(tree: Path) -> dict[str, str]:
    """The environment a server from `tree` starts with: its bytecode kept in a folder of its own (removed at exit)."""
    if tree not in _BYTECODE_DIRS:
        _BYTECODE_DIRS[tree] = tempfile.mkdtemp(prefix="inferd-startup-pyc-")
        atexit.register(shutil.rmtree, _BYTECODE_DIRS[tree], ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": _BYTECODE_DIRS[tree]}


FIRST_PROMPT = "A lighthouse keeper writes in her log each night about the ships, the weather and the sea; tonight"


def start_to_health(tree: Path, serve_args: list[str], timeout: float = 300) -> tuple[float, float, str, float]:
    """Seconds from process start to /health 200, the CPU seconds the server
    spent by then (steadier than wall time on a loaded host), how long
    the server says the model load took, and seconds from process start to
    the answer of a one-token completion sent at once after /health (what a
    client that starts a server and uses it waits: work the server leaves
    for after /health counts here)."""
    port = free_port()
    argv = [sys.executable, "-m", "inferd.cli", "serve", "--port", str(port), *serve_args]
    with tempfile.TemporaryFile("w+") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tree, stdout=log, stderr=subprocess.STDOUT,
                                env=bytecode_env(tree))
        try:
            while time.perf_counter() - started < timeout:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the server in {tree} exited: {log.read()[-2000:]}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        elapsed, cpu = time.perf_counter() - started, cpu_seconds(proc.pid)
                        httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=timeout,
                                   json={"prompt": FIRST_PROMPT, "max_tokens": 1}).raise_for_status()
                        answered = time.perf_counter() - started
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
            else:
                raise RuntimeError(f"the server in {tree} was not healthy after {timeout} s")
        finally:
            proc.terminate()
            proc.wait()
        log.seek(0)
        loaded = next((line.strip() for line in log if " loaded " in line), "")
    return elapsed, cpu, loaded[loaded.find(" in ") + 4:].split(";")[0] if loaded else "?", answered


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_features() -> str:
    """The model name and the vector instruction sets the kernels can use."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    wanted = [f for f in flags if f.startswith(("avx", "amx")) or f in ("fma", "f16c")]
    return f"{model}, {os.cpu_count()} CPUs: {' '.join(wanted) or 'no AVX'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another inferd tree to start side by side")
    parser.add_argument("--baseline-model", help="the model path the baseline serves: a link to the same file in "
                                                 "another folder keeps the two trees' tokenizer caches apart where "
                                                 "their formats differ (each would rebuild the other's on every start)")
    parser.add_argument("serve_args", nargs="*", help="options for inferd serve (after --)")
    args = parser.parse_args()
    serve_args = args.serve_args or ["--threads", "2", "--parallel", "8", "--ctx-size", "2048"]
    print(f"CPU: {cpu_features()}; load average {load_average()}", flush=True)
    trees = {"this tree": HERE}
    argv = {"this tree": serve_args}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
        argv["baseline"] = serve_args + (["--model", args.baseline_model] if args.baseline_model else [])
    for name, tree in trees.items():  # caches written, pages warm
        start_to_health(tree, argv[name])
    times: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    answers: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            seconds, cpu, load, answered = start_to_health(trees[name], argv[name])
            times[name].append(seconds)
            cpus[name].append(cpu)
            answers[name].append(answered)
            print(f"round {r + 1} {name:<10} {seconds:6.2f} s to /health, {cpu:5.2f} CPU s (model load {load}), "
                  f"{answered:6.2f} s to a first answer, load average {load_average()}", flush=True)
    print()
    for name, values in times.items():
        print(f"{name:<10} median {statistics.median(values):.2f} s, best {min(values):.2f} s over {len(values)} starts; "
              f"CPU median {statistics.median(cpus[name]):.2f} s; a first answer at {statistics.median(answers[name]):.2f} s")
    if args.baseline:
        ratios = [a / b for a, b in zip(times["this tree"], times["baseline"])]
        print(f"this tree / baseline: median of medians {statistics.median(times['this tree']) / statistics.median(times['baseline']):.2f}, "
              f"per round {', '.join(f'{r:.2f}' for r in ratios)}; CPU seconds "
              f"{statistics.median(cpus['this tree']) / statistics.median(cpus['baseline']):.2f}; first answer "
              f"{statistics.median(answers['this tree']) / statistics.median(answers['baseline']):.2f}")


if __name__ == "__main__":
    main()
