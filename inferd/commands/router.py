"""`inferd router`: the front door over a fleet of workers.

SIGTERM: stop accepting, let forwarded requests finish within
--shutdown-timeout, then stop health checks, the etcd watch and KV-event
subscriptions, and exit 0.
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn

from inferd.commands.listen import is_loopback
from inferd.config import RouterOptions
from inferd.router.app import build_router_app
from inferd.router.assemble import build_router_state

log = logging.getLogger("inferd.router")


def run_router(config: RouterOptions) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded request and health probe is noise
    state = build_router_state(config)
    if not state.api_keys and not is_loopback(config.host):
        log.warning("listening on %s without an API key: anyone who can reach it can use the fleet (set --api-key)",
                    config.host)
    server = _Server(uvicorn.Config(
        build_router_app(state), host=config.host, port=config.port,
        timeout_graceful_shutdown=config.shutdown_timeout, log_level="warning", access_log=False,
    ))

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                return await serving
            await asyncio.sleep(0.05)
        for s in server.servers:
            for sock in s.sockets:
                host, port = sock.getsockname()[:2]
                log.info("listening on http://%s:%d", host, port)
        await serving

    asyncio.run(main())
    return 0 if server.started else 1


class _Server(uvicorn.Server):
    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        # A graceful stop is the whole answer to SIGTERM: exit 0, not -15.
        self._captured_signals.clear()
