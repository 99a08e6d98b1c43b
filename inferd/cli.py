"""The `inferd` command."""

from __future__ import annotations

import argparse
import logging
import sys

from inferd import __version__, startup_collector
from inferd.bench.options import add_bench_options
from inferd.cli_llama import log_ignored, normalized
from inferd.cli_options import add_options, build
from inferd.config import EngineConfig, RouterOptions, ServeConfig
from inferd.cli_sampling import add_sampling_options
from inferd.commands.keys import add_keys_command, run_keys
from inferd.commands.ps import add_ps_commands, run_ps_command
from inferd.commands.store_cli import add_store_commands, run_store_command


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags, in every subcommand: `serve -n 64` must not read as `--parallel 64`."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="inferd", description="Serve and run language models.")
    parser.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="print a one-shot completion of PROMPT, streamed")
    gen.add_argument("prompt", help="the text to continue")
    add_sampling_options(gen, max_tokens=128)
    add_options(gen, EngineConfig)
    add_store_commands(sub)  # pull, import, list, show, rm, cp, run

    serve = sub.add_parser("serve", help="serve the model over HTTP (OpenAI and llama-server routes)")
    add_options(serve, ServeConfig, llama_server=True)

    bench = sub.add_parser("bench", help="measure a running OpenAI-compatible server's latency and throughput")
    add_bench_options(bench)

    router = sub.add_parser("router", help="route requests across a fleet of workers (static URLs or etcd)")
    add_options(router, RouterOptions)
    add_keys_command(sub)
    add_ps_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if (done := run_store_command(args)) is not None:
        return done
    if (done := run_ps_command(args)) is not None:
        return done
    if args.command == "generate":
        from inferd.commands.generate import run_generate

        return run_generate(build(EngineConfig, args), args)
    if args.command == "serve":
        startup_collector.pause()  # resumed once the server listens, or on any way out
        try:
            from inferd.commands.serve import run_serve
            from inferd.models.paths import ModelNotFoundError

            try:
                log_ignored(args)
                return run_serve(normalized(build(ServeConfig, args)))
            except ModelNotFoundError as e:
                print(f"inferd: {e}", file=sys.stderr)
                return 2
        finally:
            startup_collector.resume()
    if args.command == "router":
        startup_collector.pause()  # resumed once the router listens, or on any way out
        try:
            from inferd.commands.router import run_router

            return run_router(build(RouterOptions, args))
        except (ValueError, ImportError, OSError) as e:  # bad flags, no etcd client, no tokenizer file
            print(f"inferd router: {e}", file=sys.stderr)
            return 2
        finally:
            startup_collector.resume()
    if args.command == "keys":
        return run_keys(args)
    if args.command == "bench":
        from inferd.commands.bench import run_bench

        return run_bench(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
