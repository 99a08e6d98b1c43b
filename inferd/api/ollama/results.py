"""The pieces of Ollama's answers: timestamps, the final counters, tool calls."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from inferd.chat.tool_parsers import ToolCall, ToolCallDelta
from inferd.engine.outputs import RequestOutput

NANOSECONDS = 1_000_000_000


def created_at() -> str:
    """RFC 3339 in UTC, as Ollama writes it."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def final_fields(final: RequestOutput) -> dict:
    """done, done_reason and the counters of the finished request; durations in nanoseconds."""
    timing, usage = final.timing, final.usage
    first = timing.first_token if timing.first_token is not None else timing.finished
    return {
        "done": True,
        "done_reason": "length" if final.finish_reason == "length" else "stop",
        "total_duration": _ns(timing.finished - timing.arrival),
        "load_duration": 0,  # the model is loaded before the server takes requests
        "prompt_eval_count": usage.prompt_tokens,
        "prompt_eval_duration": _ns(first - timing.arrival),
        "eval_count": usage.completion_tokens,
        "eval_duration": _ns(timing.finished - first),
    }


def _ns(seconds: float) -> int:
    return max(0, round(seconds * NANOSECONDS))


def tool_call(name: str, arguments: str) -> dict:
    """Ollama's call shape: arguments as an object, not JSON text."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = {}
    return {"function": {"name": name, "arguments": parsed if isinstance(parsed, dict) else {}}}


def whole_calls(calls: list[ToolCall]) -> list[dict]:
    return [tool_call(c.name, c.arguments) for c in calls]


class StreamedCalls:
    """Tool-call deltas gathered until whole: Ollama streams each call complete."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._arguments: dict[int, str] = {}

    def add(self, deltas: list[ToolCallDelta]) -> None:
        for d in deltas:
            if d.name:
                self._names[d.index] = d.name
            self._arguments[d.index] = self._arguments.get(d.index, "") + d.arguments

    def take(self) -> list[dict]:
        calls = [tool_call(self._names[i], self._arguments.get(i, "")) for i in sorted(self._names)]
        self._names.clear()
        self._arguments.clear()
        return calls
