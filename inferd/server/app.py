"""The FastAPI application: middleware, error handlers, routers."""

from __future__ import annotations

from fastapi import FastAPI

from inferd import __version__
from inferd.server.body_limits import BodyLimits
from inferd.server.errors import install_error_handlers
from inferd.server.routes import health, openai
from inferd.server.state import ServerState


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="inferd", version=__version__, docs_url=None, redoc_url=None)
    app.state.inferd = state
    install_error_handlers(app)
    app.add_middleware(BodyLimits, max_body_size=state.config.max_body_size)
    app.include_router(health.router)
    app.include_router(openai.router)
    return app
