"""`inferd keys add|list|rm|rotate|usage`: manage API keys on a running server
or router (`--url`, with an admin key in `--api-key` or INFERD_API_KEY), or
offline in a data dir's key store (`--data-dir`; a server running on that
data dir sees the change within a second, `tenants/store_watch.py`).

A new or rotated secret is printed alone on stdout, so `$(inferd keys add ...)`
captures it; it is never shown again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

from inferd.tenants.keyring import KeyNotFound, KeyRing, LastAdminKey
from inferd.tenants.keys import InvalidField, changes_from, check_name
from inferd.tenants.store import DuplicateKey, KeyStore, TenantStoreError

ACTIONS = ("add", "list", "rm", "rotate", "usage")


def add_keys_command(sub) -> None:
    keys = sub.add_parser("keys", help="manage API keys: add, list, rm, rotate, usage "
                                       "(on a server with --url, or a data dir)")
    actions = keys.add_subparsers(dest="keys_action", required=True)
    for action in ACTIONS:
        p = actions.add_parser(action, help={
            "add": "make a key; prints its secret once", "list": "every key, redacted, with today's usage",
            "rm": "remove a key", "rotate": "a new secret for a key; the old one stops at once",
            "usage": "tokens and requests per key, model and UTC day"}[action])
        p.add_argument("--url", help="a running inferd serve or router, e.g. http://127.0.0.1:8080; default: offline")
        p.add_argument("--api-key", default=os.environ.get("INFERD_API_KEY"),
                       help="an admin key for --url (default: $INFERD_API_KEY)")
        p.add_argument("--data-dir", help="offline: the data dir whose key store to edit "
                                          "(default: $XDG_DATA_HOME/inferd or ~/.local/share/inferd)")
        p.add_argument("--json", action="store_true", help="print JSON")
        if action in ("add", "rm", "rotate"):
            p.add_argument("name", help="the key's name: A-Z a-z 0-9 . _ -")
        if action == "add":
            p.add_argument("--scope", action="append", default=[],
                           help="a model the key may use (repeatable; none: all)")
            p.add_argument("--admin", action="store_true", help="the key may manage keys and see all usage")
            for limit, what in (("rpm", "requests per minute"), ("tpm", "tokens per minute"),
                                ("daily-tokens", "tokens per UTC day"), ("max-concurrent", "requests in flight")):
                p.add_argument(f"--{limit}", type=int, default=0, help=f"{what}; 0 = unlimited")
            p.add_argument("--expires-in", type=float, default=None, help="seconds until the key stops working")
        if action == "usage":
            p.add_argument("--key", help="only this key")
            p.add_argument("--model", help="only this model")
            p.add_argument("--from", dest="since", help="first UTC day, YYYY-MM-DD")
            p.add_argument("--to", dest="until", help="last UTC day, YYYY-MM-DD")


def run_keys(args: argparse.Namespace) -> int:
    try:
        result = (_online if args.url else _offline)(args)
    except KeysError as error:
        print(f"inferd keys: {error}", file=sys.stderr)
        return 1
    _print(args, result)
    return 0


class KeysError(Exception):
    pass


def _add_body(args) -> dict:
    body = {"name": args.name, "scopes": args.scope, "admin": args.admin,
            "limits": {"rpm": args.rpm, "tpm": args.tpm, "daily_tokens": args.daily_tokens,
                       "max_concurrent": args.max_concurrent}}
    if args.expires_in is not None:
        body["expires_in"] = args.expires_in
    return body


def _online(args) -> dict:
    import httpx  # here: importing it (and rich, which it pulls in) would cost every inferd command
    url = args.url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    action = args.keys_action
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30.0) as client:
            if action == "add":
                r = client.post("/api/keys", json=_add_body(args))
            elif action == "list":
                r = client.get("/api/keys")
            elif action == "rm":
                r = client.delete(f"/api/keys/{args.name}")
            elif action == "rotate":
                r = client.post(f"/api/keys/{args.name}/rotate")
            else:
                params = {k: v for k, v in (("key", args.key), ("model", args.model), ("from", args.since),
                                            ("to", args.until)) if v}
                r = client.get("/api/usage", params=params)
    except httpx.HTTPError as error:
        raise KeysError(f"cannot reach {url}: {error}") from None
    try:
        body = r.json()
    except ValueError:
        raise KeysError(f"{url} answered {r.status_code} without JSON: is it an inferd server?") from None
    if r.status_code >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        raise KeysError(f"{r.status_code}: {message or body}")
    return body


def _offline(args) -> dict:
    from inferd.store.responses import default_data_dir

    folder = args.data_dir or default_data_dir()
    try:
        ring = KeyRing(KeyStore.in_dir(folder))
    except TenantStoreError as error:
        raise KeysError(str(error)) from None
    action = args.keys_action
    try:
        if action == "add":
            changes = changes_from(_add_body(args), creating=True)
            changes.pop("name", None)
            key, secret = ring.add(check_name(args.name), changes)
            return {**key.public(), "secret": secret}
        if action == "rotate":
            key, secret = ring.rotate(args.name)
            return {**key.public(), "secret": secret}
        if action == "rm":
            ring.remove(args.name)
            return {"name": args.name, "deleted": True}
        if action == "list":
            return {"object": "list", "data": [k.public() for k in ring.all()]}
        from inferd.tenants.ledger import Ledger

        rows = Ledger(ring).usage(args.key, args.model, args.since, args.until)
        return {"object": "list", "data": [r.as_dict() for r in rows]}
    except (InvalidField, DuplicateKey, KeyNotFound, LastAdminKey) as error:
        raise KeysError(str(error)) from None
    finally:
        ring.store.close()


def _print(args, result: dict) -> None:
    if args.json:
        print(json.dumps(result, indent=2))
        return
    action = args.keys_action
    if action in ("add", "rotate"):
        print(f"{'made' if action == 'add' else 'rotated'} key {result['name']!r} ({result['prefix']}); "
              "its secret, shown only now:", file=sys.stderr)
        print(result["secret"])
    elif action == "rm":
        print(f"removed key {result['name']!r}", file=sys.stderr)
    elif action == "list":
        rows = [(k["name"], k["prefix"], "admin" if k["admin"] else "", ",".join(k["scopes"]) or "*",
                 _limits(k["limits"]), "disabled" if k["disabled"] else _when(k["expires_at"], "expires "),
                 _when(k.get("last_used_at"), "used ")) for k in result["data"]]
        _table(("NAME", "PREFIX", "ROLE", "SCOPES", "LIMITS", "STATE", "LAST USED"), rows)
    else:
        rows = [(r["day"], r["key"], r["model"] or "-", r["requests"], r["prompt_tokens"], r["completion_tokens"],
                 r["cached_tokens"], r["errors"]) for r in result["data"]]
        _table(("DAY", "KEY", "MODEL", "REQUESTS", "PROMPT", "COMPLETION", "CACHED", "ERRORS"), rows)


def _limits(limits: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in limits.items() if v) or "-"


def _when(t: float | None, prefix: str) -> str:
    if t is None:
        return ""
    stamp = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")
    return f"{prefix}{stamp}" + (" (past)" if t < time.time() and prefix == "expires " else "")


def _table(header: tuple, rows: list[tuple]) -> None:
    cells = [tuple(map(str, header)), *(tuple(map(str, r)) for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
