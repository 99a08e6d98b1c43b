"""A forwarded stream cut by its worker ends with its own dialect's error event."""

from __future__ import annotations

import json

from inferd.http.errors import ServiceUnavailable
from inferd.router.stream_errors import StreamCutter

ERR = ServiceUnavailable("the worker went away", code="worker_failed")


def data_of(event: bytes) -> dict:
    lines = event.decode().strip().split("\n")
    return json.loads(next(line for line in lines if line.startswith("data: "))[6:])


def test_only_whole_sse_events_pass_and_the_cut_fragment_is_dropped():
    cutter = StreamCutter("/v1/chat/completions", "text/event-stream; charset=utf-8")
    assert cutter.feed(b'data: {"a":1}\n\ndata: {"b"') == b'data: {"a":1}\n\n'
    end = cutter.error(ERR)
    assert end.startswith(b"event: error\n")
    assert data_of(end) == {"error": {"message": "the worker went away", "type": "service_unavailable",
                                      "param": None, "code": "worker_failed"}}


def test_anthropic_streams_end_with_an_anthropic_error_event():
    cutter = StreamCutter("/v1/messages", "text/event-stream")
    end = cutter.error(ERR)
    assert end.startswith(b"event: error\n")
    assert data_of(end) == {"type": "error", "error": {"type": "overloaded_error", "message": "the worker went away"}}


def test_responses_streams_continue_the_sequence_numbers():
    cutter = StreamCutter("/v1/responses", "text/event-stream")
    cutter.feed(b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
                b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1}\n\n')
    assert data_of(cutter.error(ERR)) == {"type": "error", "code": "worker_failed", "message": "the worker went away",
                                          "param": None, "sequence_number": 2}


def test_ollama_ndjson_streams_end_with_an_error_line():
    cutter = StreamCutter("/api/chat", "application/x-ndjson")
    assert cutter.feed(b'{"done":false}\n{"do') == b'{"done":false}\n'
    assert cutter.error(ERR) == b'{"error": "the worker went away"}\n'


def test_a_body_in_no_stream_framing_gets_no_event():
    cutter = StreamCutter("/v1/chat/completions", "application/json")
    assert cutter.feed(b'{"partial') == b'{"partial'
    assert cutter.error(ERR) == b""
