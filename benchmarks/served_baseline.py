"""Served decode speed of this tree against another, in alternating rounds.

    python benchmarks/served_baseline.py --baseline /path/to/other/tree [--rounds 4] [--workloads decode-1 decode-8]
        [-- serve options]

Each round starts `inferd serve` from this tree and from the baseline (a
`git worktree` of an older commit), alternating which goes first, and runs
compare_llama_server.py's quick decode workloads against each through
`inferd bench`: a loaded host slows both alike, so compare round by round.
Speculation is off unless the serve options say otherwise, so the figures are
the plain decode steps'. Prints per round: tok/s for decode-8 (aggregate
output) and decode-1 (1000 / TPOT), the default; TTFT for prefill-1024 (mean)
and shared-prefix (median); and each server's peak RSS after its workloads.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import compare_llama_server as compare

# workload: (its figure from `inferd bench`'s summary, the unit)
FIGURES = {
    "decode-8": (lambda s: s["output_token_throughput"], "tok/s"),
    "decode-1": (lambda s: 1000 / s["tpot"]["mean_ms"], "tok/s"),
    "prefill-1024": (lambda s: s["ttft"]["mean_ms"], "ms TTFT"),
    "shared-prefix": (lambda s: s["ttft"]["median_ms"], "ms median TTFT"),
}
DEFAULT_WORKLOADS = ["decode-8", "decode-1"]


def serve(tree: Path, options: list[str]) -> compare.Server:
    """`inferd serve` run from `tree`: `python -m` puts the working directory first on the path."""
    port = compare.free_port()
    argv = [sys.executable, "-m", "inferd.cli", "serve", "--port", str(port), "--threads", "2", "--parallel", "8",
            "--ctx-size", "2048", "--speculative", "off", *options]
    return compare.Server(tree.name, ["/bin/sh", "-c", f"cd {shlex.quote(str(tree))} && exec {shlex.join(argv)}"],
                          port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, type=Path, help="another checkout of inferd")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS, choices=list(FIGURES))
    parser.add_argument("serve_options", nargs="*", help="after --: passed to both servers")
    args = parser.parse_args()
    trees = {"this tree": Path(__file__).resolve().parent.parent, "baseline": args.baseline.resolve()}
    workloads = {w.name: w for w in compare.workloads(quick=True)}
    results: dict[str, dict[str, list[float]]] = {name: {w: [] for w in args.workloads} for name in trees}
    peak_rss: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            server = serve(tree, args.serve_options)
            server.start()
            try:
                for w in args.workloads:
                    results[name][w].append(FIGURES[w][0](compare.bench(server, workloads[w], seed=r)))
                peak_rss[name].append(server.peak_rss_mb())
            finally:
                server.stop()
        print(f"round {r + 1}: " + "; ".join(f"{w} {results['this tree'][w][-1]:.1f} against "
                                            f"{results['baseline'][w][-1]:.1f} {FIGURES[w][1]}" for w in args.workloads)
              + f"; peak RSS {peak_rss['this tree'][-1]:.0f} against {peak_rss['baseline'][-1]:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
