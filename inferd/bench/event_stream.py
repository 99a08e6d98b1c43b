"""A POST whose answer streams server-sent events, read at little CPU a chunk.

The benchmark usually shares its host with the server it measures, and the
CPU the client spends on each streamed chunk is taken from the server.
httpx's stack (httpcore, anyio, h11) spent ~0.35 ms of CPU a chunk: 0.36 s
over an 8-stream run of 1,024 chunks on a 2-CPU host. Here one asyncio
connection a request, parsed by httptools (the C parser uvicorn uses), took
0.085 s for the same run (BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools


class StatusError(Exception):
    """The server answered with a status other than 200."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}: {body.decode(errors='replace')[:200]}")
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: a base URL's host, port, scheme and path prefix, and the headers every request carries."""

    host: str
    port: int
    tls: bool
    prefix: str
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, base_url: str, api_key: str | None = None) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        tls = parts.scheme == "https"
        headers = (("Authorization", f"Bearer {api_key}"),) if api_key else ()
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"), headers)

    def request_head(self, path: str, body_length: int) -> bytes:
        host = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"POST {self.prefix}{path} HTTP/1.1", f"Host: {host}:{self.port}", "Content-Type: application/json",
                 f"Content-Length: {body_length}", "Accept: text/event-stream", "Connection: close",
                 *(f"{name}: {value}" for name, value in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


class _Answer:
    """httptools' callbacks: the body's bytes as they are decoded (chunked or not), and whether it ended."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.headers_done = False
        self.complete = False

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, data: bytes) -> None:
        self.body += data

    def on_message_complete(self) -> None:
        self.complete = True


async def post_events(endpoint: Endpoint, path: str, body: bytes) -> AsyncIterator[str]:
    """The `data:` fields of the answer's events, in order, as they arrive.

    Raises StatusError for an answer other than 200 (once its body is read),
    OSError when the connection fails or ends before the answer does, and
    httptools.HttpParserError for an answer that is not HTTP.
    """
    reader, writer = await asyncio.open_connection(
        endpoint.host, endpoint.port, ssl=ssl.create_default_context() if endpoint.tls else None)
    try:
        writer.write(endpoint.request_head(path, len(body)) + body)
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        pending = b""
        while not answer.complete:
            data = await reader.read(1 << 16)
            if not data:
                if answer.headers_done and parser.get_status_code() == 200:
                    break  # a body that ends with the connection
                raise ConnectionError("the server closed the connection before its answer ended")
            parser.feed_data(data)
            if not answer.headers_done or parser.get_status_code() != 200:
                continue  # an error's body is kept whole for the message
            lines = (pending + answer.body).split(b"\n")
            answer.body.clear()
            pending = lines.pop()
            for line in lines:
                if line.startswith(b"data:"):
                    yield line[5:].strip().decode()
        if parser.get_status_code() != 200:
            raise StatusError(parser.get_status_code(), bytes(answer.body))
        if pending.startswith(b"data:"):
            yield pending[5:].strip().decode()
    finally:
        writer.close()
