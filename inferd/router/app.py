"""The router's FastAPI application: the same client routes as `inferd serve`,
forwarded, plus the router's own (fleet, health, metrics, model lists)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from inferd import __version__
from inferd.api.registry import error_response_for_path, upload_limits
from inferd.api.generating import is_generating
from inferd.console.router_stats import router_stats
from inferd.console.routes import console_router, open_paths as console_paths
from inferd.http import key_routes
from inferd.http.auth import ApiKeyAuth
from inferd.http.cors import add_cors
from inferd.http.body_limits import BodyLimits
from inferd.http.errors import install_error_handlers
from inferd.router import admin_routes, request_cards
from inferd.router.assemble import start_router, stop_router
from inferd.router.client_routes import client_routes
from inferd.router.state import RouterState


def build_router_app(state: RouterState, *, manage: bool = True) -> FastAPI:
    """`manage`: start and stop the background work (static workers, health
    checks, etcd) with the app; tests that drive those themselves say False."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if manage:
            await start_router(state)
        try:
            yield
        finally:
            if manage:
                await stop_router(state)

    app = FastAPI(title="inferd router", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.router = state
    app.state.tenants = state.tenants
    install_error_handlers(app)
    app.add_middleware(BodyLimits, max_body_size=state.config.max_body_size, respond=error_response_for_path,
                       uploads=upload_limits(state.config))
    # Health stays open, as on workers.
    app.add_middleware(ApiKeyAuth, tenants=lambda: state.tenants, open_paths=(*admin_routes.HEALTH_PATHS, *console_paths()),
                       respond=error_response_for_path, generating=is_generating,
                       services=lambda: {"traces": state.traces},
                       enter_at_door=False)  # forward admits lease, rpm and tokens in one step (router/admission.py)
    add_cors(app, state.config.cors_origin)
    app.include_router(admin_routes.router)
    app.include_router(key_routes.router)
    app.include_router(request_cards.router)
    app.include_router(console_router("router", lambda _: router_stats(state)))
    app.router.routes.extend(client_routes())
    return app
