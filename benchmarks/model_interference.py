"""What one model's long prefill costs another model's decode in one `inferd
serve`: each loaded model has its own engine thread, and the two share the
machine's cores.

    python benchmarks/model_interference.py [--runs 3] [--threads 2] [--prompt-tokens 1500]

The bundled Gemma 3 270M is the server's own model (A); a second copy with 64
zero bytes after its tensors is imported as `gemma-b` (B: another blob, so
another model with an engine of its own, loaded once before the runs). A
streams a long greedy completion (/v1/completions, ignore_eos); after its
first 16 tokens a request with a long prompt and one output token starts:

    alone        A decodes with nothing beside it
    same model   the long prompt goes to A too: one engine batches the prefill
                 with the decode in chunks of --max-batched-tokens (the peer)
    other model  the long prompt goes to B: two engines compute at once

Reported per case: A's inter-token gap (median, and the longest while the
prompt is prefilled), A's tokens/s over that window, and the prefill's time
to its first token. Each run measures the three cases back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from model_switch import free_port

DECODE_PROMPT = "Once upon a time, in a small village by the sea,"
WARM_TOKENS = 16  # A's tokens before the long prompt is sent


def stream_times(client: httpx.Client, model: str, prompt: str, max_tokens: int, times: list[float]) -> None:
    """Appends the arrival time of each streamed chunk of text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with client.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]" and json.loads(line[6:])["choices"]:
                times.append(time.monotonic())


def one_case(client: httpx.Client, long_prompt: str, target: str | None, decode_tokens: int) -> dict:
    times: list[float] = []
    decoding = threading.Thread(target=stream_times, args=(client, "gemma-3-270m", DECODE_PROMPT, decode_tokens, times))
    decoding.start()
    while len(times) < WARM_TOKENS:
        time.sleep(0.001)
    window = (time.monotonic(), None)
    if target is not None:
        first: list[float] = []
        stream_times(client, target, long_prompt, 1, first)
        window = (window[0], first[0])
    decoding.join()
    start, end = window
    if end is None:  # alone: the same span of A's decode as the prefill took in the last case
        end = start + one_case.last_window
    one_case.last_window = end - start
    gaps = [b - a for a, b in zip(times, times[1:])]
    during = [b - a for a, b in zip(times, times[1:]) if b > start and a < end]
    inside = [t for t in times if start <= t <= end]
    return {"median_gap_ms": statistics.median(gaps) * 1000, "worst_gap_ms": max(during, default=0.0) * 1000,
            "tok_s": len(inside) / (end - start), "prefill_ms": (end - start) * 1000 if target else None}


one_case.last_window = 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=1500, help="about this many tokens in the long prompt")
    parser.add_argument("--decode-tokens", type=int, default=400)
    args = parser.parse_args()
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model
    from inferd.models.default import default_model_path

    data = Path(tempfile.mkdtemp(prefix="inferd-interference-"))
    other = data / "gemma-b.gguf"
    other.write_bytes(Path(default_model_path()).read_bytes() + bytes(64))
    import_model(ModelStore(data / "models"), other, name="gemma-b", copy=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    proc = subprocess.Popen([sys.executable, "-m", "inferd.cli", "serve", "--data-dir", str(data), "--port", str(port),
                             "--threads", str(args.threads), "--parallel", "2", "--ctx-size", "4096",
                             "--keep-alive", "-1", "--preload", "gemma-b"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    words = "the river carried small stones past the mill and the miller counted them"
    rows: dict[str, list[dict]] = {"alone": [], "same model": [], "other model": []}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            while True:
                try:
                    if client.get("/health").status_code == 200 and "gemma-b" in client.get("/api/ps").text:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            for run in range(args.runs + 1):  # the first is a warm-up (oneDNN kernels for each shape), not counted
                long_prompt = f"{run} " + " ".join([words] * (args.prompt_tokens // 14))  # another prompt: no cache hit
                cases = {"other model": one_case(client, long_prompt, "gemma-b", args.decode_tokens),
                         "same model": one_case(client, long_prompt + " again", "gemma-3-270m", args.decode_tokens),
                         "alone": one_case(client, long_prompt, None, args.decode_tokens)}
                if run:
                    for name, result in cases.items():
                        rows[name].append(result)
                print(f"run {run}{' (warm-up)' if not run else ''}: " + ", ".join(
                    f"{n} {r['worst_gap_ms']:.0f} ms worst gap" for n, r in cases.items()), file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"{'long prompt beside A':<22}{'A gap median':>14}{'A worst gap':>13}{'A tok/s':>9}{'prefill ms':>12}  n")
    for name, results in rows.items():
        med = {k: statistics.median(r[k] for r in results) for k in ("median_gap_ms", "worst_gap_ms", "tok_s")}
        prefill = [r["prefill_ms"] for r in results if r["prefill_ms"] is not None]
        print(f"{name:<22}{med['median_gap_ms']:>14.1f}{med['worst_gap_ms']:>13.0f}{med['tok_s']:>9.1f}"
              f"{(statistics.median(prefill) if prefill else float('nan')):>12.0f}  {len(results)}")


if __name__ == "__main__":
    main()
