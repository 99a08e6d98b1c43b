"""Build argparse options from the documented config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing

from inferd import cli_llama


def add_options(parser: argparse.ArgumentParser, cls: type, llama_server: bool = False) -> None:
    """One `--flag` per field; `INFERD_<FIELD>` in the environment overrides the default.
    With `llama_server`, llama-server's spellings and `LLAMA_ARG_*` variables too
    (`INFERD_*` wins), and its hardware-only flags as no-ops."""
    hints = typing.get_type_hints(cls)
    # A list field `collected_from` another gathers every value of that repeated flag; the other keeps the first.
    collectors = {f.metadata["collected_from"]: f.name for f in dataclasses.fields(cls) if f.metadata.get("collected_from")}
    # A dict field `aliases_of` (flag field, list field) takes that flag's values given after the list's second item.
    paired = {f.metadata["aliases_of"][0]: (f.metadata["aliases_of"][1], f.name)
              for f in dataclasses.fields(cls) if f.metadata.get("aliases_of")}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("collected_from"):
            parser.set_defaults(**{f.name: None, f"_default_{f.name}": list(f.default)})
            continue
        if meta.get("aliases_of"):
            parser.set_defaults(**{f.name: None, f"_default_{f.name}": {}})
            continue
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        names = [flag] + ([meta["short"]] if meta.get("short") else [])
        kind = _base_type(hints[f.name])
        env_name, env = "INFERD_" + f.name.upper(), os.environ.get("INFERD_" + f.name.upper())
        if llama_server:
            names += [n for n in cli_llama.SPELLINGS.get(f.name, ()) if n not in names]
            if env is None and (env := cli_llama.environment_value(f.name)) is not None:
                env_name = cli_llama.ENVIRONMENT.get(f.name) or cli_llama.ENVIRONMENT_ALSO[f.name]
        default = f.default if env is None else _parse_env(kind, env, env_name)
        if kind is bool:
            parser.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=meta["help"])
        elif kind is list:
            # Empty items stay: INFERD_API_KEY="" (an unset shell variable) must not read as "no key".
            items = list(default) if env is None else env.split(",")
            if f.name in paired:
                models, into = paired[f.name]
                parser.add_argument(*names, dest=f.name, action=_OfLatestModel, default=None, models=models,
                                    into=into, help=f"{meta['help']}; after a second or later --model, that model's")
            else:
                parser.add_argument(*names, dest=f.name, action="append", default=None, help=meta["help"])
            parser.set_defaults(**{f"_default_{f.name}": items})
        elif f.name in collectors:
            parser.add_argument(*names, dest=f.name, type=kind, default=default, action=_FirstAndAll,
                                collector=collectors[f.name], help=f"{meta['help']} (repeatable; default: {default})")
        else:
            parser.add_argument(*names, dest=f.name, type=kind, default=default, help=f"{meta['help']} (default: {default})")
    if llama_server:
        cli_llama.add_no_op_flags(parser)


class _FirstAndAll(argparse.Action):
    """Keeps the first value in its own field and every value, in order, in `collector`."""

    def __init__(self, *args, collector: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.collector = collector

    def __call__(self, parser, namespace, value, option_string=None):
        seen = getattr(namespace, self.collector) or []
        if not seen:
            setattr(namespace, self.dest, value)
        setattr(namespace, self.collector, [*seen, value])


class _OfLatestModel(argparse.Action):
    """`--alias` before a second `--model` names the server's own model (this flag's own field);
    after it, the latest `--model` given (`into`, a dict by that model: `--model X --alias A`)."""

    def __init__(self, *args, models: str, into: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.models, self.into = models, into

    def __call__(self, parser, namespace, value, option_string=None):
        models = getattr(namespace, self.models, None) or []
        if len(models) < 2:
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), value])
            return
        pairs = dict(getattr(namespace, self.into) or {})
        names = [name.strip() for name in value.split(",") if name.strip()]
        pairs[models[-1]] = list(dict.fromkeys([*pairs.get(models[-1], []), *names]))
        setattr(namespace, self.into, pairs)


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


def _parse_env(kind: type, value: str, env_name: str):
    if kind is bool:
        return value.lower() in ("1", "true", "yes", "on", "enabled")
    try:
        return kind(value)
    except ValueError:
        raise SystemExit(f"{env_name}={value!r} is not a valid {kind.__name__}") from None
