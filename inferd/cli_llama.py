"""llama-server's command line on `inferd serve`: its spellings of inferd's
options, its `LLAMA_ARG_*` environment variables, and its hardware-only flags,
accepted as no-ops and logged once, so a llama-server command line starts
inferd unchanged.

Flags that mean something here take llama-server's meaning (sampling defaults,
--seed, -n, --alias, --chat-template-file, --chat-template-kwargs). One
difference stays: -c is tokens per sequence here, the total across slots there.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os

log = logging.getLogger("inferd.serve")

# inferd's option -> llama-server's other names for it.
SPELLINGS = {
    "default_max_tokens": ("-n", "--predict", "--n-predict"),
    "parallel": ("--n-parallel",),
    "chat_template": ("--chat-template-file",),
    "temperature": ("--temperature",),
    "cors_origin": ("--cors-origins",),
    "draft_model": ("-md", "--model-draft"),
    "spec_tokens": ("--draft", "--draft-n", "--draft-max"),
}

# inferd's option -> the environment variable llama-server reads for it (after INFERD_<NAME>).
ENVIRONMENT = {
    "model": "LLAMA_ARG_MODEL", "host": "LLAMA_ARG_HOST", "port": "LLAMA_ARG_PORT",
    "ctx_size": "LLAMA_ARG_CTX_SIZE", "parallel": "LLAMA_ARG_N_PARALLEL", "threads": "LLAMA_ARG_THREADS",
    "default_max_tokens": "LLAMA_ARG_N_PREDICT", "alias": "LLAMA_ARG_ALIAS", "api_key": "LLAMA_API_KEY",
    "api_key_file": "LLAMA_ARG_API_KEY_FILE", "chat_template": "LLAMA_ARG_CHAT_TEMPLATE",
    "chat_template_kwargs": "LLAMA_ARG_CHAT_TEMPLATE_KWARGS", "cors_origin": "LLAMA_ARG_CORS_ORIGINS",
    "metrics": "LLAMA_ARG_ENDPOINT_METRICS", "slots": "LLAMA_ARG_ENDPOINT_SLOTS",
    "reasoning_format": "LLAMA_ARG_THINK",
    "reasoning_budget": "LLAMA_ARG_THINK_BUDGET", "pooling": "LLAMA_ARG_POOLING",
    "draft_model": "LLAMA_ARG_MODEL_DRAFT", "spec_tokens": "LLAMA_ARG_DRAFT_MAX",
    "temperature": "LLAMA_ARG_TEMPERATURE", "top_k": "LLAMA_ARG_TOP_K", "top_p": "LLAMA_ARG_TOP_P",
    "min_p": "LLAMA_ARG_MIN_P", "repeat_penalty": "LLAMA_ARG_REPEAT_PENALTY",
    "presence_penalty": "LLAMA_ARG_PRESENCE_PENALTY", "frequency_penalty": "LLAMA_ARG_FREQUENCY_PENALTY",
}
# --chat-template-file's own variable feeds the same option.
ENVIRONMENT_ALSO = {"chat_template": "LLAMA_ARG_CHAT_TEMPLATE_FILE"}

# Flags about hardware and memory layout that inferd decides for itself:
# (names, nargs, environment variable or None). nargs "?" takes an optional value.
NO_OPS = (
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), 1, "LLAMA_ARG_N_GPU_LAYERS"),
    (("-fa", "--flash-attn"), "?", "LLAMA_ARG_FLASH_ATTN"),
    (("-cb", "--cont-batching"), 0, "LLAMA_ARG_CONT_BATCHING"),
    (("-nocb", "--no-cont-batching"), 0, None),
    (("--jinja",), 0, "LLAMA_ARG_JINJA"),
    (("--no-jinja",), 0, None),
    (("--warmup", "--no-warmup"), 0, None),
    (("-b", "--batch-size"), 1, "LLAMA_ARG_BATCH"),
    (("-ub", "--ubatch-size"), 1, "LLAMA_ARG_UBATCH"),
    (("--mlock",), 0, None),
    (("--mmap", "--no-mmap"), 0, None),
    (("-ctk", "--cache-type-k"), 1, "LLAMA_ARG_CACHE_TYPE_K"),
    (("-ctv", "--cache-type-v"), 1, "LLAMA_ARG_CACHE_TYPE_V"),
    (("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"), 0, "LLAMA_ARG_KV_UNIFIED"),
    (("-nkvo", "--no-kv-offload", "-kvo", "--kv-offload"), 0, "LLAMA_ARG_KV_OFFLOAD"),
    (("-sm", "--split-mode"), 1, "LLAMA_ARG_SPLIT_MODE"),
    (("-ts", "--tensor-split"), 1, "LLAMA_ARG_TENSOR_SPLIT"),
    (("-mg", "--main-gpu"), 1, "LLAMA_ARG_MAIN_GPU"),
    (("--numa",), 1, "LLAMA_ARG_NUMA"),
    (("--threads-http",), 1, "LLAMA_ARG_THREADS_HTTP"),
    (("--cache-reuse",), 1, "LLAMA_ARG_CACHE_REUSE"),
    (("-cram", "--cache-ram"), 1, "LLAMA_ARG_CACHE_RAM"),
    (("--context-shift", "--no-context-shift"), 0, "LLAMA_ARG_CONTEXT_SHIFT"),
    (("--swa-full",), 0, "LLAMA_ARG_SWA_FULL"),
    (("-to", "--timeout"), 1, "LLAMA_ARG_TIMEOUT"),
    (("--ui", "--webui", "--no-ui", "--no-webui"), 0, "LLAMA_ARG_UI"),
    (("--draft-min", "--draft-n-min"), 1, "LLAMA_ARG_DRAFT_MIN"),  # the guard sizes drafts by what pays
    (("--draft-p-min",), 1, "LLAMA_ARG_DRAFT_P_MIN"),
    (("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), 1, "LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    (("-cd", "--ctx-size-draft"), 1, "LLAMA_ARG_CTX_SIZE_DRAFT"),
    (("--log-disable",), 0, None),
    (("--prio",), 1, None),
    (("--poll",), 1, None),
)
IGNORED_DEST = "llama_server_ignored"


class _Ignored(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        getattr(namespace, IGNORED_DEST).append(option_string)


def add_no_op_flags(parser: argparse.ArgumentParser) -> None:
    names = ", ".join(n for names, _, _ in NO_OPS for n in names if n.startswith("--"))
    group = parser.add_argument_group("llama-server flags accepted and ignored (inferd places work itself)",
                                      f"logged once at start: {names}")
    parser.set_defaults(**{IGNORED_DEST: []})
    for names, nargs, _env in NO_OPS:
        kwargs = {"nargs": nargs} if nargs != 1 else {}
        if nargs == "?":
            kwargs["const"] = None
        group.add_argument(*names, action=_Ignored, dest=IGNORED_DEST, default=argparse.SUPPRESS,
                           metavar="V", help=argparse.SUPPRESS, **kwargs)


def environment_value(name: str) -> str | None:
    """The llama-server variable for option `name`, if set."""
    for table in (ENVIRONMENT, ENVIRONMENT_ALSO):
        if table.get(name) and (value := os.environ.get(table[name])) is not None:
            return value
    return None


def log_ignored(args: argparse.Namespace) -> None:
    """Each ignored flag or variable once, in one line."""
    given = list(dict.fromkeys(getattr(args, IGNORED_DEST, [])))
    given += [env for _, _, env in NO_OPS if env and env in os.environ]
    if given:
        log.info("ignoring llama-server options inferd decides itself (devices, batching, attention kernels, "
                 "KV layout): %s", ", ".join(given))


def normalized(config):
    """llama-server's values in inferd's terms: -n -1 is no limit; --alias,
    --cors-origins and --api-key take comma-separated lists; --reasoning-format auto is deepseek
    (reasoning split out wherever the model has thinking markers); --slot-save-path is an
    existing folder (start-up ends otherwise)."""
    changes = {}
    if config.reasoning_format == "auto":
        changes["reasoning_format"] = "deepseek"
    if config.default_max_tokens is not None and config.default_max_tokens < 0:
        changes["default_max_tokens"] = None
    for name in ("alias", "cors_origin"):
        items = [item.strip() for value in getattr(config, name) for item in value.split(",")]
        changes[name] = [item for item in items if item]
    # Empty keys stay, so that `--api-key "$UNSET"` is refused rather than read as no key.
    changes["api_key"] = [item for value in config.api_key for item in value.split(",")]
    if config.slot_save_path:
        # As llama-server: the folder must exist; made absolute, so a later chdir cannot move it.
        if not os.path.isdir(config.slot_save_path):
            raise SystemExit(f"inferd: --slot-save-path {config.slot_save_path}: not a directory; create it first")
        changes["slot_save_path"] = os.path.abspath(config.slot_save_path)
    return dataclasses.replace(config, **changes)
