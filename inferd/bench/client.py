"""One streamed /v1/completions request, timed token by token."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class RequestResult:
    ok: bool = False
    ttft: float = 0.0  # seconds to the first streamed text
    itl: list[float] = field(default_factory=list)  # seconds between later text chunks
    latency: float = 0.0  # seconds from send to the end of the stream
    output_tokens: int = 0  # from the server's usage
    text: str = ""
    error: str = ""


def new_http_client(base_url: str, api_key: str | None, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    # No keep-alive: some servers drop idle kept-alive connections, which would fail requests at random.
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(base_url=base_url, headers=headers, transport=transport,
                             limits=httpx.Limits(max_keepalive_connections=0), timeout=httpx.Timeout(None))


async def send_completion(http: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> RequestResult:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0}
    result = RequestResult()
    start = last = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                result.error = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:200]}"
                return result
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
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
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as e:
        result.error = f"{type(e).__name__}: {e}"
    return result
