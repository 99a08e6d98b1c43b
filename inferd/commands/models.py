"""`inferd import | list | ls | show | rm | cp`: the store's small commands."""

from __future__ import annotations

import argparse
import json
import sys

from inferd.model_store import Manifest, ModelStore, StoreError
from inferd.model_store.importing import import_model


def _failing(command: str):
    def wrap(run):
        def guarded(args: argparse.Namespace) -> int:
            try:
                return run(ModelStore.open(args.data_dir), args)
            except (StoreError, ValueError) as error:  # ValueError: a bad name
                print(f"inferd {command}: {error}", file=sys.stderr)
                return 1
        return guarded
    return wrap


@_failing("import")
def run_import(store: ModelStore, args: argparse.Namespace) -> int:
    manifest = import_model(store, args.path, args.name, copy=args.copy)
    how = "copied" if args.copy else "hard-linked"
    print(f"{manifest.model_name.short}: {manifest.format}, {len(manifest.files)} files {how}, "
          f"{manifest.size / 1e6:.1f} MB")
    return 0


@_failing("list")
def run_list(store: ModelStore, args: argparse.Namespace) -> int:
    models = store.models()
    if args.json:
        print(json.dumps([json.loads(m.to_json()) for m in models], indent=1))
        return 0
    rows = [("NAME", "ID", "SIZE", "FORMAT", "QUANTIZATION", "CREATED")]
    rows += [(m.model_name.short, m.digest[:12], human_size(m.size), m.format, m.quantization or "-",
              m.created_at.replace("T", " ").removesuffix("Z")) for m in models]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


@_failing("show")
def run_show(store: ModelStore, args: argparse.Namespace) -> int:
    manifest = store.require(args.name)
    if args.json:
        print(manifest.to_json(), end="")
        return 0
    print(describe_manifest(manifest))
    return 0


def describe_manifest(m: Manifest) -> str:
    source = m.source
    where = {"huggingface": lambda: f"{source.get('repo')}@{str(source.get('revision'))[:12]} ({source.get('endpoint')})",
             "import": lambda: f"imported from {source.get('path')}",
             "bundled": lambda: f"bundled with inferd ({source.get('package')})"}.get(source.get("type"), lambda: "?")()
    lines = [
        f"  name            {m.model_name.full}",
        f"  source          {where}",
        f"  format          {m.format}",
        f"  architecture    {m.architecture or '-'}",
        f"  parameters      {m.parameter_count:,}" if m.parameter_count else "  parameters      -",
        f"  quantization    {m.quantization or '-'}",
        f"  context length  {m.context_length or '-'}",
        f"  chat template   {'yes' if m.chat_template else 'no (a plain transcript is used)'}",
        f"  licence         {m.license or 'unknown'}",
        f"  capabilities    {', '.join(m.capabilities)}",
        f"  created         {m.created_at}",
        "  files",
    ]
    lines += [f"    {f.name}  {human_size(f.size)}  sha256:{f.sha256[:12]}" + (f"  ({f.path})" if f.path else "")
              for f in m.files]
    return "\n".join(lines)


@_failing("rm")
def run_rm(store: ModelStore, args: argparse.Namespace) -> int:
    failed = 0
    for name in args.names:
        try:
            removed = store.remove(name)
        except (StoreError, ValueError) as error:
            print(f"inferd rm: {error}", file=sys.stderr)
            failed = 1
            continue
        print(f"deleted {removed.model_name.short}")
    return failed


@_failing("cp")
def run_cp(store: ModelStore, args: argparse.Namespace) -> int:
    copied = store.copy(args.source, args.destination)
    print(f"copied {args.source} to {copied.model_name.short}")
    return 0


def human_size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


COMMANDS = {"import": run_import, "list": run_list, "ls": run_list, "show": run_show, "rm": run_rm, "cp": run_cp}
