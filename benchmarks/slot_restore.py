"""What llama-server's slot files buy in `inferd serve`: time to first token
of a prompt computed cold, against the same prompt after its slot was saved,
the prefix cache emptied, and the slot restored from the file.

    python benchmarks/slot_restore.py [--tokens 512 2048] [--runs 3] [--threads 2]

The bundled Gemma 3 270M GGUF, one server started with --slot-save-path.
Each prompt is token ids (the same ones every run). Per run: empty the cache
(POST /v1/cache/reset), time /completion with n_predict 1 (cold), save slot
0, empty the cache again, restore, time the same request (restored). The
save and restore times are the server's own `timings`; the file size is
`n_written`. Medians over the runs.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_token_ms(client: httpx.Client, prompt: list[int]) -> tuple[float, int]:
    started = time.monotonic()
    r = client.post("/completion", json={"prompt": prompt, "n_predict": 1, "temperature": 0})
    r.raise_for_status()
    return (time.monotonic() - started) * 1000, r.json()["tokens_cached"]


def post(client: httpx.Client, path: str, body: dict | None = None) -> dict:
    r = client.post(path, json=body)
    r.raise_for_status()
    return r.json()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as slots, tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen(
            [sys.executable, "-m", "inferd.cli", "serve", "--port", str(port), "--threads", str(args.threads),
             "-c", str(max(args.tokens) + 64), "-np", "1", "--slot-save-path", slots, "--data-dir", data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    try:
                        if client.get("/health").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.5)
                else:
                    raise SystemExit("the server did not become ready in 300 s")
                print(f"{'tokens':>6} {'cold ms':>8} {'save ms':>8} {'file MB':>8} {'restore ms':>10} "
                      f"{'restored ms':>11} {'cached':>6}")
                for n in args.tokens:
                    prompt = [1000 + (i * 7919) % 200000 for i in range(n)]
                    rows = []
                    for _ in range(args.runs):
                        post(client, "/v1/cache/reset")
                        cold, _ = first_token_ms(client, prompt)
                        saved = post(client, "/slots/0?action=save", {"filename": "bench.bin"})
                        post(client, "/v1/cache/reset")
                        restored = post(client, "/slots/0?action=restore", {"filename": "bench.bin"})
                        warm, cached = first_token_ms(client, prompt)
                        rows.append((cold, saved["timings"]["save_ms"], saved["n_written"] / 2**20,
                                     restored["timings"]["restore_ms"], warm, cached))
                    med = [statistics.median(column) for column in zip(*rows)]
                    print(f"{n:>6} {med[0]:>8.0f} {med[1]:>8.0f} {med[2]:>8.1f} {med[3]:>10.0f} {med[4]:>11.0f} "
                          f"{med[5]:>6.0f}")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
