"""The sampling flags `inferd generate` and `inferd run` share; their defaults
are the server's, so a command and a request with no sampling fields agree."""

from __future__ import annotations

import argparse

from inferd.serving.sampling_defaults import DEFAULT_SAMPLING


def add_sampling_options(parser: argparse.ArgumentParser, max_tokens: int | None) -> None:
    d = DEFAULT_SAMPLING
    until = "until the model stops or the context is full"
    parser.add_argument("--max-tokens", type=int, default=max_tokens,
                        help=f"tokens to generate (default: {max_tokens if max_tokens is not None else until})")
    parser.add_argument("--temperature", type=float, default=d["temperature"], help=f"0 = greedy (default: {d['temperature']})")
    parser.add_argument("--top-p", type=float, default=d["top_p"], help=f"nucleus sampling (default: {d['top_p']})")
    parser.add_argument("--top-k", type=int, default=d["top_k"], help=f"0 = off (default: {d['top_k']})")
    parser.add_argument("--min-p", type=float, default=d["min_p"], help=f"0 = off (default: {d['min_p']})")
    parser.add_argument("--seed", type=int, default=None, help="seed for reproducible sampling")
