"""Finding text no tokenizer can read: JSON may spell half a UTF-16 surrogate
pair ("\\ud800"), which decodes to a str that has no UTF-8 form."""

from __future__ import annotations

from typing import Any


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def find_unpaired_surrogate(value: Any, where: str = "") -> str | None:
    """The path in `value` (nested dicts and lists) of the first string holding
    an unpaired surrogate, or None when every string is valid."""
    if isinstance(value, str):
        return None if _is_valid_unicode(value) else where or "the text"
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not _is_valid_unicode(key):
                return f"a key of {where}" if where else "a field name"
            path = f"{where}.{key}" if where else str(key)
            if found := find_unpaired_surrogate(item, path):
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if found := find_unpaired_surrogate(item, f"{where}[{i}]"):
                return found
    return None
