"""`inferd serve`: load the model behind a listening HTTP server.

The socket opens first (health answers 503 "loading" once the app serves),
weights load on a thread, then the engine starts; with --register the worker
then enters etcd. On TCP the socket is bound before the app is built, so the
weights load while it is (their packing for oneDNN holds no GIL).
SIGTERM: leave etcd first (routers stop sending), then stop accepting, let
in-flight requests finish within --shutdown-timeout, end the rest with their
dialect's error (503 "shutting down"), exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from types import SimpleNamespace

import torch
import uvicorn

from inferd import startup_collector
from inferd.http import event_loop
from inferd.chat.template import TemplateError, chat_template_for
from inferd.commands.drain import end_unfinished_before
from inferd.commands.listen import is_loopback
from inferd.commands.sockets import bind_all, hosts_of
from inferd.config import ServeConfig
from inferd.serving.chat_defaults import check_chat_defaults
from inferd.discovery import registration
from inferd.discovery.record import WorkerRecord
from inferd.kernels import isa
from inferd.models.loader import load_model
from inferd.models.paths import ModelNotFoundError
from inferd.server.app import build_app
from inferd.models.default_embedding import resolve_with_bundled
from inferd.jobs.plane import JobPlane
from inferd.server.assemble import attach_model, new_state, start_jobs
from inferd.server.hosted_models import build_host, close_host, preload
from inferd.server.pooled_models import check_embedding_options, load_encoder_model
from inferd.serving.state import ServerState
from inferd.jobs.store import JobStoreError
from inferd.store.responses import ResponseStore, StoreError, default_data_dir
from inferd.tenants.store import TenantStoreError

log = logging.getLogger("inferd.serve")


def read_api_keys(config: ServeConfig) -> frozenset[str]:
    """The keys clients must send. An explicitly empty key (`--api-key "$KEY"`
    with KEY unset) or a key file with none would turn auth off without a word:
    both end start-up instead."""
    if any(not key.strip() for key in config.api_key):
        raise SystemExit("inferd: an --api-key (or INFERD_API_KEY) is empty, which would turn auth off: "
                         "give the key, or leave the option out to serve without one")
    keys = set(config.api_key)
    if config.api_key_file:
        try:
            with open(config.api_key_file) as f:
                from_file = {line.strip() for line in f if line.strip() and not line.strip().startswith("#")}
        except (OSError, UnicodeDecodeError) as error:
            raise SystemExit(f"inferd: cannot read --api-key-file {config.api_key_file}: "
                             f"{getattr(error, 'strerror', None) or error}") from None
        if not from_file:
            raise SystemExit(f"inferd: --api-key-file {config.api_key_file} has no keys, which would turn auth off: "
                             "put one key per line in it, or leave the option out")
        keys |= from_file
    return frozenset(keys)


def check_chat_template(config: ServeConfig) -> None:
    """An --chat-template that names no built-in or file, or does not compile,
    fails start-up with the template's own error, before any weights load."""
    if not config.chat_template:
        return
    no_tokenizer = SimpleNamespace(chat_template=None, bos_token=None, eos_token=None)
    try:
        chat_template_for(no_tokenizer, config.chat_template)
    except TemplateError as error:
        message = str(error)
        if "--chat-template" not in message:
            message = f"--chat-template {config.chat_template}: {message}"
        raise SystemExit(f"inferd: {message}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SystemExit(f"inferd: cannot read --chat-template {config.chat_template}: "
                         f"{getattr(error, 'strerror', None) or error}") from None


def open_responses_store(config: ServeConfig) -> ResponseStore:
    try:
        return ResponseStore.in_dir(config.data_dir or default_data_dir(), config.responses_ttl, config.responses_max)
    except StoreError as error:
        raise SystemExit(f"inferd: {error}") from None


def load_engine(state: ServerState, on_ready=None, on_failure=None) -> None:
    """`on_ready()` is called (on this thread) once the engine serves;
    `on_failure()` after a failed load (default: SIGTERM, which stops the server)."""
    config = state.config
    try:
        if config.threads:
            torch.set_num_threads(config.threads)
        for model in config.embedding_model:
            load_encoder_model(state, model)
        if check_embedding_options(config):  # --model is an encoder
            load_encoder_model(state, config.model, main=True)
            state.served.loaded = True
        else:
            loaded = load_model(config.model, config.dtype, config.device, config.weights, config.data_dir)
            attach_model(state, loaded)
    except Exception:
        log.exception("the model failed to load; stopping")
        state.load_failed = True
        if on_failure is not None:
            on_failure()
        else:
            os.kill(os.getpid(), signal.SIGTERM)
        return
    if state.engine is None:  # an encoder alone: logged as it loaded
        if on_ready is not None:
            on_ready()
        return
    cfg, engine = loaded.config, state.engine.engine
    log.info(
        "loaded %s from %s: %s, %d layers, %s on %s in %.1fs; KV cache %d blocks x %d tokens, parallel %d, context %d",
        state.model_name, loaded.path, cfg.arch, cfg.num_layers, str(loaded.dtype).removeprefix("torch."),
        loaded.device, loaded.load_seconds, engine.pool.num_blocks, engine.pool.block_size, config.parallel,
        engine.max_model_len,
    )
    log.info("context: %d tokens per sequence (-c here), %d across the %d slots (what llama-server's -c counts)",
             engine.max_model_len, engine.max_model_len * config.parallel, config.parallel)
    if on_ready is not None:
        on_ready()


def worker_record(state: ServerState, url: str) -> WorkerRecord:
    config = state.config
    return WorkerRecord(id=registration.worker_id_for(url), url=url, model=state.model_name,
                        parallel=config.parallel, block_size=config.block_size, capabilities=["kv-events"])


def run_serve(config: ServeConfig) -> int:
    name, _ = resolve_with_bundled(config.model, config.data_dir)  # fails fast on a bad path or name
    try:
        check_embedding_options(config)
    except (ValueError, OSError) as error:
        raise SystemExit(f"inferd: {error}") from None
    if config.register:
        registration.check_options(config.register, config.register_ttl)
        if config.host.endswith(".sock") and not config.advertise_url:
            raise SystemExit("inferd: --register on a Unix socket needs --advertise-url (routers connect over HTTP)")
    # Everything that can be checked before the socket opens and weights load is checked here.
    try:
        isa.selected()
    except isa.IsaError as error:
        raise SystemExit(f"inferd: {error}") from None
    api_keys = read_api_keys(config)
    check_chat_template(config)
    try:
        check_chat_defaults(config, name)
    except ValueError as error:
        raise SystemExit(f"inferd: {error}") from None
    try:
        state = new_state(config, name, api_keys, key_store_dir=config.data_dir or default_data_dir())
    except (ValueError, TenantStoreError) as error:
        raise SystemExit(f"inferd: {error}") from None
    try:
        state.host = build_host(state)
    except (ValueError, ModelNotFoundError) as error:
        raise SystemExit(f"inferd: {error}") from None
    state.responses_store = open_responses_store(config)
    state.responses_store.purge_expired()
    try:  # before the socket opens and any weights load, as every other store
        jobs = JobPlane.in_dir(config.data_dir or default_data_dir(), config.max_file_size)
    except JobStoreError as error:
        raise SystemExit(f"inferd: {error}") from None
    try:
        hosts = hosts_of(config.host)
        sockets = bind_all(hosts, config.port) if len(hosts) > 1 else None
    except (ValueError, OSError) as error:
        raise SystemExit(f"inferd: {error}") from None
    unix = config.host.endswith(".sock")
    if sockets is None and not unix:
        try:
            sockets = [bind_like_uvicorn(config.host, config.port)]
        except OSError as error:
            log.error("could not listen on %s:%s (%s): stop what is using it, or pick another --host/--port",
                      config.host, config.port, error.strerror.lower() if error.strerror else error)
            return 1
    if not state.tenants.enabled and not all(is_loopback(h) for h in hosts):
        log.warning("listening on %s without an API key: anyone who can reach it can use it (set --api-key)", config.host)
    after_load = _AfterLoad()
    loading = threading.Thread(target=load_engine, args=(state, after_load.ready, after_load.failed),
                               name="inferd-load", daemon=True)
    if not unix:  # the socket is bound: the weights load while the app is built and starts
        loading.start()
    app = build_app(state)
    app.state.jobs = jobs  # where start_jobs and the job routes find it (assemble.attach_jobs, opened earlier)
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
        loop = server.loop = asyncio.get_running_loop()
        serving = asyncio.create_task(serve_or_report(server, config, sockets))
        while not server.started:
            if serving.done():
                return await serving
            await asyncio.sleep(0.05)
        tcp = []
        for s in server.servers:
            for sock in s.sockets:
                address = sock.getsockname()
                where = address if isinstance(address, str) else f"http://{address[0]}:{address[1]}"
                log.info("listening on %s", where)
                if not isinstance(address, str):
                    tcp.append(address)
        on_ready = None
        if config.register:
            url = (config.advertise_url or registration.default_advertise_url(tcp[0])).rstrip("/")
            reg = registration.Registration(config.register, worker_record(state, url), config.register_prefix,
                                            config.register_ttl)
            server.before_drain = reg.stop

            def on_ready():  # a router must never see a worker that is still loading
                loop.call_soon_threadsafe(reg.start)

        if unix:  # the socket is uvicorn's: the load starts once it listens
            loading.start()
        startup_collector.resume(freeze=True)  # imports and app built: what they made stays, untraversed
        after_load.listening(on_ready)
        preloading = asyncio.ensure_future(preload(state))
        start_jobs(app, state)  # unfinished jobs resume; items wait (retried) while the model loads
        await serving
        await jobs.runner.stop()  # items still running stay pending for the next start
        state.draining = True
        if server.before_drain is not None:
            await server.before_drain()  # already done on SIGTERM; here for any other way out
        if state.engine is not None:
            state.engine.shutdown()
        state.audio.shutdown()  # audio jobs still queued are dropped; a running one ends with its request
        state.served.close()
        preloading.cancel()
        await close_host(state)
        await asyncio.to_thread(state.tenants.close)  # usage and last-used times not yet written
        jobs.close()

    event_loop.run(main())
    return 1 if state.load_failed or not server.started else 0


def running_engines(state: ServerState) -> list:
    """The server's own engine and every engine of a model loaded on demand, once each."""
    engines = [state.engine] if state.engine is not None else []
    if state.host is not None:
        engines += [e for e in state.host.engines() if all(e is not o for o in engines)]
    return engines


def bind_like_uvicorn(host: str, port: int) -> socket.socket:
    """The socket uvicorn would bind for one TCP address (it listens once serving)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _AfterLoad:
    """What follows the model's load, done once the server also listens (the
    load may end first): on success `on_ready` (entering etcd), on failure a
    SIGTERM, which stops the server as any stop does. Before uvicorn's handler
    is installed a SIGTERM would kill the process outright."""

    def __init__(self):
        self._lock = threading.Lock()
        self._outcome: str | None = None  # "ready" or "failed", once the load ends
        self._listening = False
        self._on_ready = None

    def ready(self) -> None:  # the load thread
        self._ended("ready")

    def failed(self) -> None:  # the load thread
        self._ended("failed")

    def listening(self, on_ready=None) -> None:  # the event loop, once the server listens
        with self._lock:
            self._listening, self._on_ready, outcome = True, on_ready, self._outcome
        self._act(outcome)

    def _ended(self, outcome: str) -> None:
        with self._lock:
            self._outcome, listening = outcome, self._listening
        if listening:
            self._act(outcome)

    def _act(self, outcome: str | None) -> None:
        if outcome == "failed":
            os.kill(os.getpid(), signal.SIGTERM)
        elif outcome == "ready" and self._on_ready is not None:
            self._on_ready()


async def serve_or_report(server: uvicorn.Server, config, sockets=None) -> None:
    """`server.serve()`, where a socket that cannot be opened (a port in use)
    is the one line uvicorn logs plus ours, not a traceback: uvicorn ends its
    start-up with sys.exit, which would escape the event loop. The caller sees
    `server.started` false."""
    try:
        await server.serve(sockets=sockets)  # sockets: --host listing several addresses, bound already
    except SystemExit:
        if server.started:
            raise
        where = config.host if config.host.endswith(".sock") else f"{config.host}:{config.port}"
        log.error("could not listen on %s: stop what is using it, or pick another --host/--port", where)


class _Server(uvicorn.Server):
    """Marks the state draining the moment a stop signal arrives, so health
    says so. With `before_drain` (leaving etcd), the drain waits for it: new
    requests are still served until routers have stopped sending them."""

    def __init__(self, state: ServerState, config: uvicorn.Config):
        super().__init__(config)
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None
        self.before_drain = None  # async callable
        self._leaving = False
        self._leave_task: asyncio.Task | None = None

    def handle_exit(self, sig, frame) -> None:
        self.state.draining = True
        if self.before_drain is not None and not self._leaving and self.loop is not None:
            # A signal handler may interrupt the loop anywhere: hand over through the thread-safe door.
            self._leaving = True
            self.loop.call_soon_threadsafe(self._leave_then_drain, sig, frame)
            return
        self._drain(sig, frame)

    def _leave_then_drain(self, sig, frame) -> None:
        async def leave():
            try:
                await self.before_drain()
            except Exception:
                log.exception("leaving the fleet failed; draining anyway")
            if not self.should_exit:  # a second signal may have started the drain already
                self._drain(sig, frame)

        self._leave_task = asyncio.ensure_future(leave())

    def _drain(self, sig, frame) -> None:
        engines = running_engines(self.state)
        for engine in engines:
            engine.kv_events.close()  # endless streams would hold the drain to its timeout
        if engines and self.loop is not None and not self.should_exit:
            loop = self.loop
            # Stopping the engines ends each request left with a 503 or its dialect's error event.
            end_unfinished_before(self.config.timeout_graceful_shutdown, loop,
                                  lambda: [loop.run_in_executor(None, e.shutdown) for e in engines])
        super().handle_exit(sig, frame)
        # uvicorn re-raises captured signals after a graceful stop, which would
        # make a clean drain exit -15; the drain is the whole answer to SIGTERM.
        self._captured_signals.clear()
