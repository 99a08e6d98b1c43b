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
        elif kind is list:
            # Empty items stay: INFERD_API_KEY="" (an unset shell variable) must not read as "no key".
            items = list(default) if env is None else env.split(",")
            parser.add_argument(*names, dest=f.name, action="append", default=None, help=meta["help"])
            parser.set_defaults(**{f"_default_{f.name}": items})
        else:
            parser.add_argument(*names, dest=f.name, type=kind, default=default, help=f"{meta['help']} (default: {default})")


def build(cls: type, args: argparse.Namespace):
    values = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name)
        if value is None and hasattr(args, f"_default_{f.name}"):
            value = getattr(args, f"_default_{f.name}")  # a repeatable flag never given
        values[f.name] = value
    return cls(**values)


def _base_type(hint) -> type:
    if typing.get_origin(hint) is list:
        return list
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return _base_type(args[0]) if args else hint


def _parse_env(kind: type, value: str, name: str):
    if kind is bool:
        return value.lower() in ("1", "true", "yes", "on")
    try:
        return kind(value)
    except ValueError:
        raise SystemExit(f"INFERD_{name.upper()}={value!r} is not a valid {kind.__name__}") from None
