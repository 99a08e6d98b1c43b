"""Build argparse options from the documented config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """One `--flag` per field; `INFERD_<FIELD>` in the environment overrides the default."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        names = [flag] + ([meta["short"]] if meta.get("short") else [])
        kind = _base_type(hints[f.name])
        env = os.environ.get("INFERD_" + f.name.upper())
        default = f.default if env is None else _parse_env(kind, env, f.name)
        if kind is bool:
            parser.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=meta["help"])
        else:
            parser.add_argument(*names, dest=f.name, type=kind, default=default, help=f"{meta['help']} (default: {default})")


def build(cls: type, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _base_type(hint) -> type:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _parse_env(kind: type, value: str, name: str):
    if kind is bool:
        return value.lower() in ("1", "true", "yes", "on")
    try:
        return kind(value)
    except ValueError:
        raise SystemExit(f"INFERD_{name.upper()}={value!r} is not a valid {kind.__name__}") from None
