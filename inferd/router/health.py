"""Health checks: every interval, each worker's `/health` decides whether it
takes traffic and feeds its circuit breaker.

    200 (status ok)              ready, breaker success
    200 draining / 503           not ready (loading or draining), no failure:
                                 the worker is alive and says so
    other 2xx-4xx                ready, breaker success (an engine without /health)
    other 5xx, connect, timeout  breaker failure

A worker's models come from its `/v1/models` at every healthy check: the
ones it serves or has stored, the other names each answers to (a card's
`aliases`), and which of them it has loaded now (an inferd worker loads
models on demand and unloads idle ones, its own too on a keep_alive 0).
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from inferd.router.fleet import Fleet
from inferd.router.worker import Worker

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0


async def check_worker(fleet: Fleet, worker: Worker, client: httpx.AsyncClient, headers: dict | None = None) -> None:
    try:
        response = await client.get(f"{worker.url}/health", timeout=PROBE_TIMEOUT, headers=headers)
    except httpx.HTTPError as e:
        _failed(worker, f"{type(e).__name__}: {e}".rstrip(": "))
        return
    status = response.status_code
    if status == 503 or (status == 200 and _says_draining(response)):
        if worker.ready:
            log.info("worker %s is not ready (%s)", worker.id, _status_text(response))
        worker.ready = False
        return
    if status >= 500:
        _failed(worker, f"/health answered {status}")
        return
    if not worker.ready:
        log.info("worker %s is ready", worker.id)
    worker.ready = True
    worker.breaker.record_success()
    await learn_models(fleet, worker, client, headers)


async def learn_models(fleet: Fleet, worker: Worker, client: httpx.AsyncClient, headers: dict | None = None) -> None:
    try:
        response = await client.get(f"{worker.url}/v1/models", timeout=PROBE_TIMEOUT, headers=headers)
        data = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return  # tried again on the next healthy check
    if not isinstance(data, list):
        return
    # Every model it lists, stored ones ("loaded": false) too: it loads them on demand.
    cards = [card for card in data if isinstance(card, dict) and isinstance(card.get("id"), str)]
    if fleet.get(worker.id) is not worker:
        return  # it left (or was replaced) while we asked
    fleet.model_cards[worker.id] = cards
    if worker.model is None and cards:
        worker.model = next((c["id"] for c in cards if c.get("loaded", True) is not False), cards[0]["id"])
        log.info("worker %s serves %s", worker.id, worker.model)


async def check_fleet(fleet: Fleet, client: httpx.AsyncClient, headers: dict | None = None) -> None:
    workers = list(fleet.workers.values())
    await asyncio.gather(*(check_worker(fleet, w, client, headers) for w in workers))


async def run_health_checks(fleet: Fleet, client: httpx.AsyncClient, interval: float,
                            headers: dict | None = None) -> None:
    """Runs until cancelled; the first check comes after one interval (start-up does its own)."""
    while True:
        await asyncio.sleep(interval)
        await check_fleet(fleet, client, headers)


def _failed(worker: Worker, why: str) -> None:
    before = worker.breaker.state
    worker.breaker.record_failure()
    if worker.breaker.state != before:
        log.warning("worker %s: breaker %s after %s", worker.id, worker.breaker.state, why)


def _says_draining(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "draining"


def _status_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    status = body.get("status") if isinstance(body, dict) else None
    return status or f"HTTP {response.status_code}"
