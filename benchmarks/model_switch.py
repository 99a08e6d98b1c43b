"""What a model switch costs in one `inferd serve`: time to first token of a
request whose model is already loaded, of one that loads it, and of one that
must first unload another (--max-loaded-models 1).

    python benchmarks/model_switch.py [--runs 3] [--threads 2]

The bundled Gemma 3 270M GGUF is imported twice into a fresh data dir:
`gemma-a` as it is and `gemma-b` with 64 zero bytes after its tensors (which
no reader looks at), so the two are different blobs and so two models (one
set of bytes under two names is one model); the server's own model is the
bundled one. Each
request is a streamed /v1/completions of one token; times are from sending
it to the first token. Order per run: a (load), a (loaded), b (evict a, load
b), a (evict b, load a), a (loaded). The weight cache is built once before
the runs, so "load" is a load from a warm page cache and weight cache, as a
switch on a serving machine is.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

PROMPT = "The capital of France is"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_token_ms(client: httpx.Client, model: str) -> float:
    started = time.monotonic()
    with client.stream("POST", "/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 1,
                                                         "temperature": 0, "stream": True}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and '"text"' in line:
                return (time.monotonic() - started) * 1000
    raise RuntimeError("no token came")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model
    from inferd.models.default import default_model_path

    data = Path(tempfile.mkdtemp(prefix="inferd-switch-"))
    store = ModelStore(data / "models")
    import_model(store, Path(default_model_path()), name="gemma-a", copy=True)
    other = data / "gemma-b.gguf"
    other.write_bytes(Path(default_model_path()).read_bytes() + bytes(64))
    import_model(store, other, name="gemma-b", copy=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERD_")}
    proc = subprocess.Popen([sys.executable, "-m", "inferd.cli", "serve", "--data-dir", str(data), "--port", str(port),
                             "--threads", str(args.threads), "--parallel", "1", "--ctx-size", "512",
                             "--max-loaded-models", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows: dict[str, list[float]] = {"loaded": [], "load": [], "switch (unload + load)": []}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            for name in ("gemma-a", "gemma-b"):  # builds each one's weight cache
                first_token_ms(client, name)
            own = [first_token_ms(client, "gemma-3-270m") for _ in range(args.runs)]
            for _ in range(args.runs):
                client.post("/api/generate", json={"model": "gemma-b", "keep_alive": 0})
                rows["load"].append(first_token_ms(client, "gemma-a"))
                rows["loaded"].append(first_token_ms(client, "gemma-a"))
                rows["switch (unload + load)"].append(first_token_ms(client, "gemma-b"))
                rows["switch (unload + load)"].append(first_token_ms(client, "gemma-a"))
                rows["loaded"].append(first_token_ms(client, "gemma-a"))
                client.post("/api/generate", json={"model": "gemma-a", "keep_alive": 0})
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"{'request':<26}{'TTFT median (ms)':>18}{'min':>10}{'max':>10}  n")
    for name, values in [("the server's own model", own), *rows.items()]:
        print(f"{name:<26}{statistics.median(values):>18.0f}{min(values):>10.0f}{max(values):>10.0f}  {len(values)}")


if __name__ == "__main__":
    main()
