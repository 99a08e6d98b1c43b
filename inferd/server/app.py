"""The FastAPI application of `inferd serve`: middleware, error handlers, the
server's own routes (health, metrics, cache, KV events) and every dialect's
routes from the registry."""

from __future__ import annotations

from importlib import import_module

from fastapi import FastAPI, Request

from inferd import __version__
from inferd.api.registry import DIALECTS, error_response_for_path, upload_limits
from inferd.api.generating import is_generating
from inferd.console.routes import console_router, open_paths as console_paths
from inferd.console.server_stats import server_stats
from inferd.http import key_routes
from inferd.http.auth import ApiKeyAuth
from inferd.http.cors import add_cors
from inferd.http.body_limits import BodyLimits
from inferd.http.errors import error_response, install_error_handlers
from inferd.http.request_metrics import RequestMetrics
from inferd.server.model_select import ModelSelect
from inferd.server.routes import cache, health, kv_events, metrics, requests
from inferd.serving.generation import ENGINE_UNAVAILABLE, engine_unavailable
from inferd.serving.state import ServerState


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="inferd", version=__version__, docs_url=None, redoc_url=None)
    app.state.inferd = state
    app.state.tenants = state.tenants
    install_error_handlers(app)

    async def unavailable(_: Request, exc: Exception):  # engine calls made outside a dialect's generation
        return error_response(engine_unavailable(exc))

    for exc_type in ENGINE_UNAVAILABLE:
        app.add_exception_handler(exc_type, unavailable)
    # Added first runs last: a request reaches its model once it has passed the door and the limits.
    app.add_middleware(ModelSelect, state=lambda: state, respond=error_response_for_path)
    app.add_middleware(BodyLimits, max_body_size=state.config.max_body_size, respond=error_response_for_path,
                       uploads=upload_limits(state.config))
    # Added last runs first: metrics count every answer, auth's 401s included.
    app.add_middleware(ApiKeyAuth, tenants=lambda: state.tenants, open_paths=(*health.HEALTH_PATHS, *console_paths()),
                       respond=error_response_for_path, services=lambda: {"cards": state.cards},
                       generating=is_generating)
    app.add_middleware(RequestMetrics, metrics=lambda: state.metrics)
    add_cors(app, state.config.cors_origin)
    for router in (health.router, metrics.router, cache.router, kv_events.router, key_routes.router,
                   requests.router):
        app.include_router(router)
    app.include_router(console_router("server", lambda _: server_stats(state)))
    for dialect in DIALECTS:
        app.include_router(import_module(dialect.routes).router)
    return app
