"""`inferd pull NAME`: a model from the Hugging Face Hub into the store, a
progress bar per file (huggingface_hub's)."""

from __future__ import annotations

import argparse
import sys

from inferd.model_store import ModelStore, StoreError
from inferd.model_store.pull import Progress, pull


def run_pull(args: argparse.Namespace) -> int:
    store = ModelStore.open(args.data_dir)
    try:
        manifest = pull_with_bars(store, args.name, verify=args.verify)
    except (StoreError, ValueError) as error:
        print(f"inferd pull: {error}", file=sys.stderr)
        return 1
    print(f"{manifest.model_name.short}: {len(manifest.files)} files, {manifest.size / 1e6:.1f} MB, verified")
    return 0


def pull_with_bars(store: ModelStore, name: str, verify: bool = False):
    def say(event: Progress) -> None:
        if not event.status.startswith("pulling ") or event.status == "pulling manifest":
            print(event.status, file=sys.stderr)

    return pull(store, name, say, verify=verify, show_bars=True)
