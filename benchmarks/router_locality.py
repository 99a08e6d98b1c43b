"""The shared-prefix workload through `inferd router` over three workers: kv-aware against round-robin.

    python benchmarks/router_locality.py [--rounds 3] [--threads 1] [--parallel 4] [--weights FORMAT]

Starts a throwaway etcd (Debian's etcd-server binary, as the tests do),
three `inferd serve` workers on the bundled Gemma 3 270M Q4_K_M registered
in it, and one `inferd router` per policy watching the same prefix. Each
round runs both policies (alternating which goes first): every worker's
prefix cache is reset, then `inferd bench --json` sends the workload through
that policy's router. The script prints, per run and as the median over
rounds, the median TTFT and output throughput the client saw and the
workers' own prefix-cache hit rate (prompt blocks found cached over blocks
looked up, summed over the three workers' GET /v1/cache/stats), then the
kv-aware / round-robin ratios.

Three workers with `--threads 1` each share this machine's two cores (with
the routers and the client), so absolute figures are lower than one
two-thread server's; both policies run on the same fleet, so the ratios
compare. Only ratios are comparable across runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

from etcd import EtcdServer, find_etcd  # noqa: E402  (the tests' harness: free ports, temporary data dir)
from fleet import cache_counters, reset_caches  # noqa: E402  (summed over the workers' /v1/cache/stats)
from router_process import RouterProcess  # noqa: E402
from server import ServerProcess  # noqa: E402

POLICIES = ("kv-aware", "round-robin")
PREFIX = "/bench/workers/"


def workload_args(args: argparse.Namespace) -> list[str]:
    return ["--dataset", "shared-prefix", "--groups", str(args.groups), "--prompts-per-group",
            str(args.prompts_per_group), "--system-prompt-len", str(args.system_prompt_len), "--question-len",
            str(args.question_len), "--output-len", str(args.output_len), "--max-concurrency",
            str(args.max_concurrency), "--seed", str(args.seed)]


def warm_up(workers: list[ServerProcess]) -> None:
    """One short completion on each worker: the first request pays one-off start-up costs."""
    for w in workers:
        with w.http(timeout=120.0) as client:
            r = client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 4, "temperature": 0})
            r.raise_for_status()


def run_policy(router: RouterProcess, workers: list[ServerProcess], args: argparse.Namespace) -> dict:
    reset_caches(workers)
    queries0, hits0 = cache_counters(workers)
    argv = [sys.executable, "-m", "inferd.cli", "bench", "--base-url", router.base_url, "--json",
            *workload_args(args)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise RuntimeError(f"inferd bench through {router.policy} failed:\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    if summary["failed"]:
        raise RuntimeError(f"inferd bench through {router.policy}: {summary['failed']} failed: {summary['errors']}")
    queries1, hits1 = cache_counters(workers)
    return {
        "ttft_median_ms": summary["ttft"]["median_ms"],
        "output_tok_s": summary["output_token_throughput"],
        "hit_rate": (hits1 - hits0) / (queries1 - queries0) if queries1 > queries0 else 0.0,
        "duration_s": summary["total_time_s"],
        "completed": summary["completed"],
    }


def start_fleet(folder: Path, args: argparse.Namespace, etcd: EtcdServer):
    weights = ["--weights", args.weights] if args.weights else []
    workers = [ServerProcess(None, parallel=args.parallel, ctx_size=args.ctx_size, threads=args.threads,
                             startup_timeout=300, log_path=folder / f"worker-{i}.log",
                             extra_args=[*weights, "--register", etcd.address, "--register-prefix", PREFIX])
               for i in range(3)]
    routers = {policy: RouterProcess(etcd=etcd.address, etcd_prefix=PREFIX, policy=policy, wait_workers=3,
                                     log_path=folder / f"router-{policy}.log") for policy in POLICIES}
    return workers, routers


def start_together(procs: list) -> None:
    with ThreadPoolExecutor(len(procs)) as pool:
        errors = [f.exception() for f in [pool.submit(p.start) for p in procs]]
    failed = [e for e in errors if e is not None]
    if failed:
        raise failed[0]


def row(label: str, r: dict) -> str:
    return (f"{label:<22}{r['ttft_median_ms']:>16.1f}{r['output_tok_s']:>16.2f}{r['hit_rate']:>16.1%}"
            f"{r['duration_s']:>12.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each policy (alternating which goes first)")
    parser.add_argument("--threads", type=int, default=1, help="each worker's --threads")
    parser.add_argument("--parallel", type=int, default=4, help="each worker's --parallel")
    parser.add_argument("--ctx-size", type=int, default=2048, help="each worker's --ctx-size")
    parser.add_argument("--weights", default=None, help="each worker's --weights; default: the server's own")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--prompts-per-group", type=int, default=6)
    parser.add_argument("--system-prompt-len", type=int, default=600)
    parser.add_argument("--question-len", type=int, default=24)
    parser.add_argument("--output-len", type=int, default=8)
    parser.add_argument("--max-concurrency", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs (the folder is printed)")
    args = parser.parse_args()

    binary = find_etcd()
    if binary is None:
        sys.exit("router_locality: needs an etcd binary on PATH (Debian: apt-get install etcd-server)")
    folder = Path(tempfile.mkdtemp(prefix="inferd-router-bench-"))
    etcd = EtcdServer(folder / "etcd", binary=binary).start()  # its port is known from here on
    workers, routers = start_fleet(folder, args, etcd)
    runs: dict[str, list[dict]] = {p: [] for p in POLICIES}
    try:
        started = time.monotonic()
        start_together(workers)
        start_together(list(routers.values()))
        print(f"fleet up in {time.monotonic() - started:.0f}s; logs in {folder}"
              f"{'' if args.keep_logs else ' (removed at the end; --keep-logs keeps them)'}", file=sys.stderr)
        warm_up(workers)
        for i in range(args.rounds):
            order = POLICIES if i % 2 == 0 else POLICIES[::-1]
            for policy in order:
                runs[policy].append(run_policy(routers[policy], workers, args))
                print(f"round {i + 1}: {policy} done", file=sys.stderr)
    finally:
        for p in [*routers.values(), *workers]:
            try:
                p.stop(timeout=30)
            except RuntimeError:  # ignored SIGTERM: stop() killed it
                pass
        etcd.stop()
        if not args.keep_logs:
            shutil.rmtree(folder, ignore_errors=True)

    print(f"workers: 3 x inferd serve, bundled {workers[0].model_name}, --threads {args.threads} "
          f"--parallel {args.parallel} --ctx-size {args.ctx_size}{' --weights ' + args.weights if args.weights else ''}"
          "; one router per policy, all watching one etcd")
    print(f"workload: inferd bench {' '.join(workload_args(args))}")
    print(f"{'policy (run)':<22}{'median TTFT ms':>16}{'output tok/s':>16}{'hit rate':>16}{'time s':>12}")
    medians = {}
    for policy in POLICIES:
        for i, r in enumerate(runs[policy]):
            print(row(f"{policy} ({i + 1})", r))
        medians[policy] = {k: statistics.median(r[k] for r in runs[policy]) for k in runs[policy][0]}
    for policy in POLICIES:
        print(row(f"{policy} (median)", medians[policy]))
    kv, rr = medians["kv-aware"], medians["round-robin"]
    hit_ratio = f"{kv['hit_rate'] / rr['hit_rate']:.2f}x" if rr["hit_rate"] else "n/a (round-robin hit nothing)"
    print(f"kv-aware / round-robin: median TTFT {kv['ttft_median_ms'] / rr['ttft_median_ms']:.2f}x, "
          f"output throughput {kv['output_tok_s'] / rr['output_tok_s']:.2f}x, prefix-cache hit rate {hit_ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
