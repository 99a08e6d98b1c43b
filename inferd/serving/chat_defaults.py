"""Server-wide chat defaults from the command line: --chat-template-kwargs
(variables every chat template render gets, under each request's own) and
--default-model, checked before any weights load."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from inferd.serving.chat_request import RESERVED_TEMPLATE_VARIABLES


@lru_cache(maxsize=8)
def _parsed(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"--chat-template-kwargs is not valid JSON ({error}); give an object, "
                         "e.g. '{\"enable_thinking\": false}'") from None
    if not isinstance(value, dict):
        raise ValueError("--chat-template-kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'")
    reserved = sorted(set(value) & set(RESERVED_TEMPLATE_VARIABLES))
    if reserved:
        raise ValueError(f"--chat-template-kwargs may not set {', '.join(reserved)}: each request sets it")
    return value


def template_defaults(config) -> dict[str, Any]:
    """--chat-template-kwargs as a dict (a copy: callers merge into it)."""
    text = getattr(config, "chat_template_kwargs", None)
    return dict(_parsed(text)) if text else {}


def check_chat_defaults(config, model_name: str) -> None:
    """ValueError naming the option when --chat-template-kwargs, --default-model or
    --reasoning-format cannot work."""
    template_defaults(config)
    if config.reasoning_format not in ("deepseek", "none"):
        raise ValueError(f"--reasoning-format must be deepseek (or auto, the same) or none, got "
                         f"{config.reasoning_format!r}")
    default = config.default_model
    if default and not config.embedding_model:
        names = [*config.alias, model_name]
        if default not in names:
            raise ValueError(f"--default-model {default!r} is not served here; it must be one of "
                             f"{', '.join(map(repr, dict.fromkeys(names)))} (the model's name or an --alias)")
