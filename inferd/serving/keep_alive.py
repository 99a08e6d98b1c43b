"""How long a model stays loaded after its last request: Ollama's `keep_alive`
and `--keep-alive`. A duration ("5m", "1h30m", "90s", "500ms"), a number of
seconds, 0 (unload once the request ends) or a negative value (stay loaded)."""

from __future__ import annotations

import re

FOREVER = None  # what a negative keep-alive parses to
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def parse_keep_alive(value: str | float) -> float | None:
    """Seconds, or None (FOREVER) for a negative value; ValueError says what is accepted."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return FOREVER if value < 0 else float(value)
    text = value.strip() if isinstance(value, str) else repr(value)  # true, a list: not a duration
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return FOREVER if seconds < 0 else seconds
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
    parts = _PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"keep_alive {value!r} is not a duration: give seconds (300), a duration "
                         "(\"5m\", \"1h30m\", \"90s\"), 0 to unload after the request, or -1 to keep the model loaded")
    seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    return FOREVER if seconds < 0 else seconds
