"""One streamed /v1/completions request, timed token by token."""

from __future__ import annotations

import json
import time
from contextlib import aclosing
from dataclasses import dataclass, field

from httptools import HttpParserError

from inferd.bench.event_stream import Endpoint, StatusError, post_events


@dataclass
class RequestResult:
    ok: bool = False
    ttft: float = 0.0  # seconds to the first streamed text
    itl: list[float] = field(default_factory=list)  # seconds between later text chunks
    latency: float = 0.0  # seconds from send to the end of the stream
    output_tokens: int = 0  # from the server's usage
    text: str = ""
    error: str = ""


async def send_completion(endpoint: Endpoint, model: str, prompt: str, max_tokens: int) -> RequestResult:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0}
    result = RequestResult()
    start = last = time.perf_counter()
    try:
        async with aclosing(post_events(endpoint, "/v1/completions", json.dumps(body).encode())) as events:
            async for data in events:
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                text = "".join(c.get("text") or "" for c in chunk.get("choices") or [])
                if not text:
                    continue
                now = time.perf_counter()
                if not result.text:
                    result.ttft = now - start
                else:
                    result.itl.append(now - last)
                last = now
                result.text += text
        result.latency = time.perf_counter() - start
        result.ok = True
    except StatusError as e:
        result.error = str(e)
    except (OSError, HttpParserError, json.JSONDecodeError, KeyError) as e:
        result.error = f"{type(e).__name__}: {e}"
    return result
