"""`inferd ps` and `inferd stop NAME`: the models a running server holds, and
unloading one, over its Ollama routes (GET /api/ps; POST /api/generate with
no prompt and keep_alive 0)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import datetime, timezone


DEFAULT_URL = "http://127.0.0.1:8080"


class ServerError(Exception):
    pass


def add_ps_commands(sub) -> None:
    ps = sub.add_parser("ps", help="the models a running server has loaded, their size and when each unloads")
    stop = sub.add_parser("stop", help="unload a model from a running server now")
    stop.add_argument("name", help="the model's name (as `inferd ps` shows it)")
    ps.add_argument("--json", action="store_true", help="print the server's JSON")
    for p in (ps, stop):
        p.add_argument("--url", default=os.environ.get("INFERD_URL", DEFAULT_URL),
                       help=f"the server (default: $INFERD_URL or {DEFAULT_URL})")
        p.add_argument("--api-key", default=os.environ.get("INFERD_API_KEY"),
                       help="a key for the server (default: $INFERD_API_KEY)")


def run_ps_command(args: argparse.Namespace) -> int | None:
    """The exit status when `args` is ps or stop, else None."""
    if args.command not in ("ps", "stop"):
        return None
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    try:
        if args.command == "ps":
            answer = _call(args, "GET", "/api/ps")
            print(json.dumps(answer, indent=2) if args.json else table(answer["models"]))
        else:
            answer = _call(args, "POST", "/api/generate", {"model": args.name, "keep_alive": 0})
            if answer.get("done_reason") != "unload":  # a server that keeps its own model loaded for its life
                raise ServerError(f"{args.name} was not unloaded: the server answered {answer.get('done_reason')!r} "
                                  "(it keeps its own model, its first --model, loaded)")
    except ServerError as error:
        print(f"inferd: {error}", file=sys.stderr)
        return 1
    return 0


def table(models: list[dict], now: datetime | None = None) -> str:
    rows = [("NAME", "SIZE", "CONTEXT", "UNTIL")]
    for m in models:
        rows.append((m["name"], _size(m.get("size", 0)), str(m.get("context_length", "")),
                     _until(m.get("expires_at"), now or datetime.now(timezone.utc))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _until(expires_at: str | None, now: datetime) -> str:
    if not expires_at or expires_at.startswith("9999"):
        return "Forever"
    when = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    seconds = max(0, int((when - now).total_seconds()))
    if seconds >= 3600:
        return f"{seconds // 3600} hours from now"
    if seconds >= 60:
        return f"{seconds // 60} minutes from now"
    return f"{seconds} seconds from now"


def _call(args, method: str, path: str, body: dict | None = None) -> dict:
    import httpx  # here: importing it (and rich, which it pulls in) would cost every inferd command
    url = args.url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=600.0) as client:
            r = client.request(method, path, json=body)
    except httpx.HTTPError as error:
        raise ServerError(f"cannot reach {url}: {error} (is `inferd serve` running there? --url names it)") from None
    try:
        answer = r.json()
    except ValueError:
        raise ServerError(f"{url} answered {r.status_code} without JSON: is it an inferd server?") from None
    if r.status_code >= 400:
        message = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(message, dict):
            message = message.get("message")
        raise ServerError(message or f"{url} answered {r.status_code}")
    return answer
