"""`inferd bench`: build a dataset, send it to a server, print what it measured."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import httpx

from inferd.bench.client import send_completion
from inferd.bench.event_stream import Endpoint
from inferd.bench.datasets import Session, multi_turn_sessions, random_sessions, shared_prefix_sessions
from inferd.bench.report import CacheCounters, format_report, summarize
from inferd.bench.runner import run_sessions
from inferd.bench.tokenizer import text_maker_for
from inferd.http import event_loop


def build_sessions(args: argparse.Namespace, http: httpx.Client) -> list[Session]:
    maker = text_maker_for(http)
    if args.dataset == "shared-prefix":
        return shared_prefix_sessions(maker, args.seed, args.groups, args.prompts_per_group,
                                      args.system_prompt_len, args.question_len, args.output_len)
    if args.dataset == "multi-turn":
        return multi_turn_sessions(maker, args.seed, args.num_prompts, args.turns, args.input_len, args.output_len)
    return random_sessions(maker, args.seed, args.num_prompts, args.input_len, args.output_len)


def first_model(http: httpx.Client) -> str:
    r = http.get("/v1/models")
    r.raise_for_status()
    return r.json()["data"][0]["id"]


def cache_counters(http: httpx.Client) -> CacheCounters | None:
    """The server's prefix-cache counters, or None when it does not expose them."""
    try:
        r = http.get("/v1/cache/stats")
        if r.status_code != 200:
            return None
        stats = r.json()
        return CacheCounters(stats["prefix_cache_queries"], stats["prefix_cache_hits"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


async def measure(args: argparse.Namespace, endpoint: Endpoint, model: str, sessions: list[Session]):
    return await run_sessions(sessions, lambda prompt, n: send_completion(endpoint, model, prompt, n),
                              args.request_rate, args.max_concurrency, args.seed, progress_out=sys.stderr)


def run_bench(args: argparse.Namespace) -> int:
    # httpx logs every request at INFO, which would bury the progress line.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    with httpx.Client(base_url=args.base_url, headers=headers, timeout=60) as http:
        try:
            endpoint = Endpoint.parse(args.base_url, args.api_key)
            model = args.model or first_model(http)
            sessions = build_sessions(args, http)
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
            print(f"inferd bench: cannot prepare against {args.base_url}: {e}", file=sys.stderr)
            return 2
        before = cache_counters(http)
        run = event_loop.run(measure(args, endpoint, model, sessions))
        after = cache_counters(http)
    summary = summarize(run.results, run.duration, before, after)
    print(json.dumps(summary) if args.json else format_report(summary))
    return 0 if summary["failed"] == 0 else 1
