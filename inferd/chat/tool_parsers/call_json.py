"""Turning a call's JSON text into a name and compact arguments, or rejecting it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json(text: str) -> Any:
    """The value, or None when the text is not one JSON value.

    Raw control characters inside strings are accepted (models write literal newlines);
    NaN and Infinity are not, since no client could read them back.
    """
    try:
        return json.loads(text, strict=False, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def _utf8_safe(text: str) -> bool:
    # A lone surrogate from a `\ud800` escape cannot be sent on as UTF-8.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def compact_arguments(value: Any) -> str | None:
    """Compact JSON text for an arguments object; None when it is not an object."""
    if not isinstance(value, dict):
        return None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if _utf8_safe(text) else None


def call_from_value(value: Any, argument_keys: Sequence[str]) -> tuple[str, str] | None:
    """(name, arguments) from `{"name": ..., <argument key>: {...}}`; None if it is not one.

    A call with no arguments key takes no arguments, as models write for tools that
    have no parameters.
    """
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    if not isinstance(name, str) or not name or not _utf8_safe(name):
        return None
    key = next((k for k in argument_keys if k in value), None)
    arguments = compact_arguments({} if key is None else value[key])
    return None if arguments is None else (name, arguments)


def call_from_json(text: str, argument_keys: Sequence[str]) -> tuple[str, str] | None:
    return call_from_value(load_json(text), argument_keys)
