"""The benchmark's streamed POST: events split anywhere by the network,
chunked or not, error answers, and the request it sends."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from inferd.bench.client import send_completion
from inferd.bench.event_stream import Endpoint, StatusError, post_events


def chunked(payload: bytes, sizes: list[int]) -> bytes:
    """`payload` in HTTP/1.1 chunks of the given sizes (the rest in one more), then the last chunk."""
    out, at = b"", 0
    for size in sizes + [len(payload)]:
        piece = payload[at:at + size]
        if piece:
            out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        at += len(piece)
    return out + b"0\r\n\r\n"


async def serve_once(answer: bytes, pieces: int = 1):
    """A server that reads one request, writes `answer` in `pieces` writes (each flushed), then closes.
    Yields (endpoint, the request it read)."""
    seen: dict[str, bytes] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        seen["head"], seen["body"] = head, await reader.readexactly(length)
        step = max(1, -(-len(answer) // pieces))
        for at in range(0, len(answer), step):
            writer.write(answer[at:at + step])
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, Endpoint.parse(f"http://127.0.0.1:{port}/base/", "k-1"), seen


async def collect(answer: bytes, pieces: int = 1, body: bytes = b"{}"):
    server, endpoint, seen = await serve_once(answer, pieces)
    async with server:
        events = [data async for data in post_events(endpoint, "/v1/completions", body)]
    return events, seen


EVENTS = b"".join(b"data: " + json.dumps({"n": i, "text": "x" * i}).encode() + b"\n\n" for i in range(20)) \
    + b": a comment\n\ndata: [DONE]\n\n"
WANTED = [json.dumps({"n": i, "text": "x" * i}) for i in range(20)] + ["[DONE]"]
HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("pieces", [1, 7, 97, 1000])
@pytest.mark.parametrize("sizes", [[], [5, 1, 300], [13] * 40])
def test_events_split_anywhere_come_out_whole_and_in_order(pieces, sizes):
    events, _ = asyncio.run(collect(HEAD_CHUNKED + chunked(EVENTS, sizes), pieces))
    assert events == WANTED


def test_a_body_that_ends_with_the_connection():
    events, _ = asyncio.run(collect(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + EVENTS, 11))
    assert events == WANTED


def test_a_last_line_without_its_newline_still_counts():
    body = b"data: a\n\ndata: b"
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    events, _ = asyncio.run(collect(answer, 3))
    assert events == ["a", "b"]


def test_an_error_answer_raises_with_its_status_and_body():
    body = json.dumps({"error": {"message": "max_tokens must be at least 1"}}).encode()
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    with pytest.raises(StatusError) as caught:
        asyncio.run(collect(answer, 5))
    assert caught.value.status == 400
    assert str(caught.value) == f"HTTP 400: {body.decode()}"


def test_a_connection_that_ends_before_the_answer_does():
    with pytest.raises(ConnectionError, match="closed the connection before its answer ended"):
        asyncio.run(collect(b"HTTP/1.1 200 OK\r\nContent-Ty"))


def test_the_request_names_path_host_length_and_key():
    _, seen = asyncio.run(collect(HEAD_CHUNKED + chunked(EVENTS, []), body=b'{"a": 1}'))
    lines = seen["head"].decode().split("\r\n")
    port = lines[1].rsplit(":", 1)[1]
    assert lines[:8] == ["POST /base/v1/completions HTTP/1.1", f"Host: 127.0.0.1:{port}",
                         "Content-Type: application/json", "Content-Length: 8", "Accept: text/event-stream",
                         "Connection: close", "Authorization: Bearer k-1", ""]
    assert seen["body"] == b'{"a": 1}'


def test_endpoints_from_base_urls():
    assert Endpoint.parse("https://example.com") == Endpoint("example.com", 443, True, "")
    assert Endpoint.parse("http://[::1]:8080/v2/") == Endpoint("::1", 8080, False, "/v2")
    assert Endpoint.parse("http://[::1]:8080").request_head("/x", 0).split(b"\r\n")[1] == b"Host: [::1]:8080"
    with pytest.raises(ValueError, match="is not an http:// or https:// URL"):
        Endpoint.parse("localhost:8080")


def test_a_refused_connection_is_a_failed_request_not_a_crash():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = asyncio.run(send_completion(Endpoint.parse(f"http://127.0.0.1:{port}"), "m", "hi", 4))
    assert not result.ok
    assert result.error.startswith("ConnectionRefusedError:")


def test_a_completion_is_timed_and_counted_from_its_events():
    chunks = [{"choices": [{"text": t}]} for t in ("Hel", "lo", "", " there")]
    chunks.append({"choices": [], "usage": {"completion_tokens": 3}})
    events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"

    async def run():
        server, endpoint, seen = await serve_once(HEAD_CHUNKED + chunked(events, [40, 40]), 9)
        async with server:
            return await send_completion(endpoint, "tiny", "Say hello", 3), json.loads(seen["body"])

    result, sent = asyncio.run(run())
    assert (result.ok, result.error, result.text, result.output_tokens) == (True, "", "Hello there", 3)
    assert len(result.itl) == 2 and 0 < result.ttft <= result.latency
    assert sent == {"model": "tiny", "prompt": "Say hello", "max_tokens": 3, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0}
