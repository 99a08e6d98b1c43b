"""`inferd serve`: load the model behind a listening HTTP server.

The socket opens first (health answers 503 "loading"), weights load on a
thread, then the engine starts. SIGTERM: stop accepting, let in-flight
requests finish within --shutdown-timeout, abort the rest, exit 0.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import threading

import torch
import uvicorn

from inferd.chat.template import chat_template_for
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.models.loader import load_model, resolve_model_path
from inferd.server.app import build_app
from inferd.server.metrics import server_metrics
from inferd.server.chat_features import attach_chat_features
from inferd.server.state import ServerState
from inferd.store.responses import ResponseStore, default_data_dir

log = logging.getLogger("inferd.serve")


def read_api_keys(config: ServeConfig) -> frozenset[str]:
    keys = {k for k in config.api_key if k}
    if config.api_key_file:
        with open(config.api_key_file) as f:
            keys |= {line.strip() for line in f if line.strip() and not line.startswith("#")}
    return frozenset(keys)


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".sock"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_engine(state: ServerState) -> None:
    config = state.config
    try:
        if config.threads:
            torch.set_num_threads(config.threads)
        loaded = load_model(config.model, config.dtype, config.device)
        state.template = chat_template_for(loaded.tokenizer, config.chat_template)
        attach_chat_features(state, loaded)
        engine = Engine(loaded, config)
        state.loaded = loaded
        state.engine = AsyncEngine(engine)
    except Exception:
        log.exception("the model failed to load; stopping")
        state.load_failed = True
        os.kill(os.getpid(), signal.SIGTERM)
        return
    cfg = loaded.config
    log.info(
        "loaded %s from %s: %s, %d layers, %s on %s in %.1fs; KV cache %d blocks x %d tokens, parallel %d, context %d",
        state.model_name, loaded.path, cfg.arch, cfg.num_layers, str(loaded.dtype).removeprefix("torch."),
        loaded.device, loaded.load_seconds, engine.pool.num_blocks, engine.pool.block_size, config.parallel,
        engine.max_model_len,
    )


def run_serve(config: ServeConfig) -> int:
    name, _ = resolve_model_path(config.model)  # fails fast on a bad path
    state = ServerState(config=config, model_name=name, api_keys=read_api_keys(config))
    if config.metrics:
        state.metrics = server_metrics(state)
    state.responses_store = ResponseStore.in_dir(config.data_dir or default_data_dir(), config.responses_ttl,
                                                 config.responses_max)
    state.responses_store.purge_expired()
    if not state.api_keys and not is_loopback(config.host):
        log.warning("listening on %s without an API key: anyone who can reach it can use it (set --api-key)", config.host)
    app = build_app(state)
    unix = config.host.endswith(".sock")
    server = _Server(state, uvicorn.Config(
        app,
        host=None if unix else config.host,
        port=config.port,
        uds=config.host if unix else None,
        timeout_graceful_shutdown=config.shutdown_timeout,
        log_level="warning",
        access_log=False,
    ))

    async def main() -> None:
        serving = asyncio.create_task(server.serve())
        while not server.started:
            if serving.done():
                return await serving
            await asyncio.sleep(0.05)
        for s in server.servers:
            for sock in s.sockets:
                address = sock.getsockname()
                where = address if isinstance(address, str) else f"http://{address[0]}:{address[1]}"
                log.info("listening on %s", where)
        threading.Thread(target=load_engine, args=(state,), name="inferd-load", daemon=True).start()
        await serving
        state.draining = True
        if state.engine is not None:
            state.engine.shutdown()

    asyncio.run(main())
    return 1 if state.load_failed else 0


class _Server(uvicorn.Server):
    """Marks the state draining the moment a stop signal arrives, so health says so."""

    def __init__(self, state: ServerState, config: uvicorn.Config):
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig, frame) -> None:
        self.state.draining = True
        super().handle_exit(sig, frame)
        # uvicorn re-raises captured signals after a graceful stop, which would
        # make a clean drain exit -15; the drain is the whole answer to SIGTERM.
        self._captured_signals.clear()
