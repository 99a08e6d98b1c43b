"""`inferd router`: the front door over a fleet of workers.

SIGTERM: stop accepting, let forwarded requests finish within
--shutdown-timeout and end the rest with their dialect's error (503
"shutting down"), then stop health checks, the etcd watch and KV-event
subscriptions, and exit 0.
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn

from inferd import startup_collector
from inferd.commands.drain import end_unfinished_before
from inferd.commands.listen import is_loopback
from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.http import event_loop
from inferd.http.errors import ServiceUnavailable
from inferd.router.assemble import build_router_state
from inferd.router.state import RouterState
from inferd.store.responses import default_data_dir
from inferd.tenants.store import TenantStoreError

log = logging.getLogger("inferd.router")


def check_api_keys(config: RouterOptions) -> None:
    """An explicitly empty key would turn auth off without a word: --api-key ""
    lets every client in, --worker-api-key "" sends workers no key at all."""
    if any(not key.strip() for key in config.api_key):
        raise SystemExit("inferd router: an --api-key (or INFERD_API_KEY) is empty, which would turn auth off: "
                         "give the key, or leave the option out to serve without one")
    if config.worker_api_key is not None and not config.worker_api_key.strip():
        raise SystemExit("inferd router: --worker-api-key (or INFERD_WORKER_API_KEY) is empty, so workers would get "
                         "no key: give the workers' key, or leave the option out")


def run_router(config: RouterOptions) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded request and health probe is noise
    check_api_keys(config)
    try:
        state = build_router_state(config, key_store_dir=config.data_dir or default_data_dir())
    except TenantStoreError as error:
        raise SystemExit(f"inferd router: {error}") from None
    if not state.tenants.enabled and not is_loopback(config.host):
        log.warning("listening on %s without an API key: anyone who can reach it can use the fleet (set --api-key)",
                    config.host)
    server = _Server(state, uvicorn.Config(
        build_router_app(state), host=config.host, port=config.port,
        timeout_graceful_shutdown=config.shutdown_timeout, log_level="warning", access_log=False,
    ))

    async def serve_or_report() -> None:
        # uvicorn ends a failed start-up (a port in use) with sys.exit, which would escape the
        # event loop as a traceback after uvicorn's own clear line: add ours and return instead.
        try:
            await server.serve()
        except SystemExit:
            if server.started:
                raise
            log.error("could not listen on %s:%d: stop what is using it, or pick another --host/--port",
                      config.host, config.port)

    async def main() -> None:
        server.loop = asyncio.get_running_loop()
        serving = asyncio.create_task(serve_or_report())
        while not server.started:
            if serving.done():
                return await serving
            await asyncio.sleep(0.05)
        startup_collector.resume(freeze=True)  # what start-up built stays, untraversed by collections
        for s in server.servers:
            for sock in s.sockets:
                host, port = sock.getsockname()[:2]
                log.info("listening on http://%s:%d", host, port)
        await serving

    event_loop.run(main())
    return 0 if server.started else 1


class _Server(uvicorn.Server):
    def __init__(self, state: RouterState, config: uvicorn.Config):
        super().__init__(config)
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig, frame) -> None:
        if self.loop is not None and not self.should_exit:
            proxy = self.state.proxy
            shutting_down = ServiceUnavailable("the router is shutting down; send the request again",
                                               code="shutting_down")
            end_unfinished_before(self.config.timeout_graceful_shutdown, self.loop,
                                  lambda: proxy.cut_all(shutting_down))
        super().handle_exit(sig, frame)
        # A graceful stop is the whole answer to SIGTERM: exit 0, not -15.
        self._captured_signals.clear()
