"""The flags of `inferd bench`."""

from __future__ import annotations

import argparse


def add_bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", default="http://127.0.0.1:8080", help="server to load (default: %(default)s)")
    p.add_argument("--model", default=None, help="model name to send; default: the first of GET /v1/models")
    p.add_argument("--api-key", default=None, help="sent as a bearer token")
    p.add_argument("--dataset", choices=("random", "shared-prefix", "multi-turn"), default="random")
    p.add_argument("--num-prompts", type=int, default=100, help="prompts (random) or conversations (multi-turn)")
    p.add_argument("--input-len", type=int, default=1024, help="prompt tokens (random), user tokens per turn (multi-turn)")
    p.add_argument("--output-len", type=int, default=128, help="tokens generated per request")
    p.add_argument("--groups", type=int, default=4, help="shared-prefix: distinct system prompts")
    p.add_argument("--prompts-per-group", type=int, default=8, help="shared-prefix: questions per system prompt")
    p.add_argument("--system-prompt-len", type=int, default=512, help="shared-prefix: system prompt tokens")
    p.add_argument("--question-len", type=int, default=64, help="shared-prefix: question tokens")
    p.add_argument("--turns", type=int, default=3, help="multi-turn: turns per conversation")
    p.add_argument("--request-rate", type=float, default=float("inf"),
                   help="sessions started per second, Poisson arrivals; inf = all at once (default)")
    p.add_argument("--max-concurrency", type=int, default=None, help="requests in flight at most; default: no limit")
    p.add_argument("--seed", type=int, default=0, help="seed for prompts and arrival times")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
