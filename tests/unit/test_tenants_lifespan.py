"""The key store's watcher thread ends with the app that serves the keys:
`inferd serve`'s app and `inferd router`'s (even one whose background work
the caller drives, `manage=False`) stop it when their lifespan shuts down;
the tenants themselves stay open for whoever opened them, and close once."""

from __future__ import annotations

import asyncio

from inferd.config import RouterOptions, ServeConfig
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state
from inferd.server.app import build_app
from inferd.server.assemble import new_state


async def live_and_shut_down(app) -> list[str]:
    """The app's lifespan, as uvicorn runs it: start-up, then shut-down; what the app answered."""
    asked = asyncio.Queue()
    for event in ("lifespan.startup", "lifespan.shutdown"):
        asked.put_nowait({"type": event})
    answered = []

    async def send(message):
        answered.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, asked.get, send)
    return answered


def test_a_servers_shutdown_ends_its_key_store_watcher(tmp_path):
    state = new_state(ServeConfig(), "tiny", frozenset({"admin-secret"}), key_store_dir=tmp_path)
    watch = state.tenants.watch
    assert watch is not None and watch.running
    answered = asyncio.run(live_and_shut_down(build_app(state)))
    assert answered == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not watch.running
    state.tenants.ring.add("after-shutdown", {})  # the store is still open: jobs may still settle after
    state.tenants.close()
    state.tenants.close()  # once is enough; again does nothing


def test_a_routers_shutdown_ends_its_key_store_watcher_even_unmanaged(tmp_path):
    state = build_router_state(RouterOptions(worker=["http://127.0.0.1:1"], health_interval=0), key_store_dir=tmp_path)
    watch = state.tenants.watch
    assert watch is not None and watch.running
    answered = asyncio.run(live_and_shut_down(build_router_app(state, manage=False)))
    assert answered[-1] == "lifespan.shutdown.complete" and not watch.running
    state.tenants.close()
