"""An OpenAI batch input file: one request per line,
{"custom_id": ..., "method": "POST", "url": <the batch's endpoint>, "body": {...}}.
Read whole before anything runs, so a bad line fails the batch with its
line number (and every other bad line's) and nothing is generated."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_REQUESTS = 50_000
MAX_ERRORS = 100


@dataclass(frozen=True)
class LineError:
    line: int
    code: str
    message: str
    param: str | None = None

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def parse_batch_input(data: bytes, endpoint: str) -> tuple[list[tuple[str, dict]], list[LineError]]:
    """The requests as (custom_id, body), or the errors that refuse the file."""
    items: list[tuple[str, dict]] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return [], [LineError(data.count(b"\n", 0, e.start) + 1, "invalid_encoding", "the file is not UTF-8 text")]
    for number, line in enumerate(text.splitlines(), start=1):
        if len(errors) >= MAX_ERRORS:
            break
        if not line.strip():
            continue
        error = _check_line(line, number, endpoint, seen)
        if isinstance(error, LineError):
            errors.append(error)
            continue
        seen[error[0]] = number
        items.append(error)
    if not items and not errors:
        errors.append(LineError(1, "empty_file", "the input file holds no requests"))
    if len(items) > MAX_REQUESTS:
        errors.append(LineError(MAX_REQUESTS + 1, "too_many_requests",
                                f"a batch holds at most {MAX_REQUESTS} requests; split the file"))
    return (items, []) if not errors else ([], errors)


def _check_line(line: str, number: int, endpoint: str, seen: dict[str, int]) -> tuple[str, dict] | LineError:
    try:
        request = json.loads(line)
    except ValueError as e:
        return LineError(number, "invalid_json_line", f"line {number} is not valid JSON: {e}")
    if not isinstance(request, dict):
        return LineError(number, "invalid_json_line", f"line {number} is not a JSON object")
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(number, "missing_required_parameter",
                         f"line {number} has no custom_id (a non-empty string naming the request)", "custom_id")
    if custom_id in seen:
        return LineError(number, "duplicate_custom_id",
                         f"custom_id {custom_id!r} on line {number} was already used on line {seen[custom_id]}; "
                         "every request needs its own", "custom_id")
    method = request.get("method", "POST")
    if method != "POST":
        return LineError(number, "invalid_method", f"line {number}: method must be POST, got {method!r}", "method")
    url = request.get("url")
    if url != endpoint:
        return LineError(number, "mismatched_url",
                         f"line {number}: url {url!r} is not the batch's endpoint {endpoint!r}", "url")
    body = request.get("body")
    if not isinstance(body, dict):
        return LineError(number, "invalid_request", f"line {number}: body must be a JSON object", "body")
    if body.get("stream"):
        return LineError(number, "invalid_request", f"line {number}: a batch request cannot stream; "
                         "drop \"stream\"", "body.stream")
    if body.get("background"):
        return LineError(number, "invalid_request", f"line {number}: a batch request already runs in the "
                         "background; drop \"background\"", "body.background")
    return custom_id, body
