"""The model store's subcommands: their arguments, and which module runs each.
Light to import: `inferd --help` loads no torch."""

from __future__ import annotations

import argparse

from inferd.cli_options import add_options
from inferd.cli_sampling import add_sampling_options
from inferd.config import EngineConfig

_DATA_DIR = "the data dir whose store to use; default: $INFERD_DATA_DIR, else $XDG_DATA_HOME/inferd (~/.local/share/inferd)"


def add_store_commands(sub) -> None:
    pull = sub.add_parser("pull", help="download a model from Hugging Face into the store (owner/repo or owner/repo:QUANT)")
    pull.add_argument("name", help="owner/repo (its safetensors model) or owner/repo:Q4_K_M (that GGUF file)")
    pull.add_argument("--verify", action="store_true", help="re-hash what is stored first; damaged files are fetched again")
    _data_dir(pull)

    imp = sub.add_parser("import", help="add a local .gguf file or Hugging Face folder to the store (hard-linked)")
    imp.add_argument("path", help="a .gguf file, or a folder with config.json and *.safetensors")
    imp.add_argument("--name", default=None, help="the name to store it under, name[:tag] (default: the file or folder name)")
    imp.add_argument("--copy", action="store_true", help="copy the bytes instead of hard-linking them (needed across filesystems)")
    _data_dir(imp)

    for alias in ("list", "ls"):
        listing = sub.add_parser(alias, help="list the stored models")
        listing.add_argument("--json", action="store_true", help="the manifests as JSON")
        _data_dir(listing)

    show = sub.add_parser("show", help="what the store knows of a model: files, format, architecture, size")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="the manifest as JSON")
    _data_dir(show)

    rm = sub.add_parser("rm", help="remove stored models (bytes no other name shares are deleted)")
    rm.add_argument("names", nargs="+", metavar="name")
    _data_dir(rm)

    cp = sub.add_parser("cp", help="give a stored model another name (no bytes are copied)")
    cp.add_argument("source")
    cp.add_argument("destination")
    _data_dir(cp)

    run = sub.add_parser("run", help="chat with a model here: one answer to PROMPT, or a chat without one (pulls it first)")
    run.add_argument("name", help="a stored model, owner/repo[:QUANT] to pull, or a path")
    run.add_argument("prompt", nargs="?", default=None, help="answer this and exit; without it, an interactive chat")
    add_sampling_options(run, max_tokens=None)
    add_options(run, EngineConfig)


def _data_dir(parser: argparse.ArgumentParser) -> None:
    import os

    parser.add_argument("--data-dir", default=os.environ.get("INFERD_DATA_DIR"), help=_DATA_DIR)


def run_store_command(args: argparse.Namespace) -> int | None:
    """The exit status of a store command, or None when `args` is another command."""
    command = args.command
    if command in ("pull", "run"):
        import logging

        for client in ("httpx", "httpx2"):  # one log line per hub request would drown the progress bars
            logging.getLogger(client).setLevel(logging.WARNING)
    if command == "pull":
        from inferd.commands.pull import run_pull

        return run_pull(args)
    if command in ("import", "list", "ls", "show", "rm", "cp"):
        from inferd.commands import models

        return models.COMMANDS[command](args)
    if command == "run":
        from inferd.cli_options import build
        from inferd.commands.run import run_chat

        config = build(EngineConfig, args)
        config.model = args.name
        return run_chat(config, args)
    return None
