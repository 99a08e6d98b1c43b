"""Putting a server together, the one way `inferd serve` and the tests do it:
the state first (the socket can open while weights load), then the model."""

from __future__ import annotations

from functools import partial

from fastapi import FastAPI

from inferd.api.anthropic import batches as message_batches
from inferd.api.openai import batches
from inferd.api.responses import background
from inferd.audio.service import AudioService
from inferd.chat.reasoning import think_token_ids
from inferd.chat.template import chat_template_for
from inferd.config import ServeConfig
from inferd.engine.async_engine import AsyncEngine
from inferd.engine.engine import Engine
from inferd.jobs.plane import JobPlane
from inferd.jobs.runner import JobRunner
from inferd.model_store.speech import stored_speech_model
from inferd.models.loader import LoadedModel
from inferd.server.job_dispatch import InProcessDispatch
from inferd.server.pooled_models import serve_chat_model
from inferd.serving.chat_defaults import template_defaults
from inferd.serving.chat_features import attach_chat_features
from inferd.serving.metrics import server_metrics
from inferd.serving.state import ServerState
from inferd.tenants.build import open_tenants


def new_state(config: ServeConfig, model_name: str, api_keys: frozenset[str] = frozenset(),
              key_store_dir=None) -> ServerState:
    """A server with no model yet: health answers "loading" until `attach_model`.
    Managed keys live in `key_store_dir` (None: in memory only); raises
    ValueError on a bad tenants option, TenantStoreError on a store that cannot be opened."""
    state = ServerState(config=config, model_name=model_name, api_keys=api_keys)
    # Loads nothing until an audio request comes; --whisper-model and --voice may be stored names.
    state.audio = AudioService.from_config(config, partial(stored_speech_model, data_dir=config.data_dir))
    if config.metrics:
        state.metrics = server_metrics(state)
    state.tenants = open_tenants(key_store_dir, api_keys, storage=config.rate_limit_storage,
                                 isolate_cache=config.isolate_cache,
                                 registry=state.metrics.registry if state.metrics is not None else None)
    return state


def attach_model(state: ServerState, loaded: LoadedModel) -> None:
    """Serve `loaded`: its chat template and chat features, then its engine (last: it marks the server ready)."""
    state.template = chat_template_for(loaded.tokenizer, state.config.chat_template)
    state.template.defaults = template_defaults(state.config)
    attach_chat_features(state, loaded)
    state.loaded = loaded
    state.engine = AsyncEngine(Engine(loaded, state.config, think_ids=think_token_ids(loaded.tokenizer)))
    serve_chat_model(state, loaded)
    state.served.loaded = True


def attach_jobs(app: FastAPI, state: ServerState, data_dir) -> JobPlane:
    """Files, batches and background responses kept in `data_dir` (raises JobStoreError when it cannot be opened);
    they run once `start_jobs` is called."""
    plane = JobPlane.in_dir(data_dir, state.config.max_file_size)
    app.state.jobs = plane
    return plane


def start_jobs(app: FastAPI, state: ServerState) -> JobRunner:
    """Runs the jobs (those a previous process left unfinished first); call on the server's event loop."""
    plane: JobPlane = app.state.jobs
    kinds = {"batch": batches.job_kind(plane), "message_batch": message_batches.job_kind()}
    if state.responses_store is not None:
        kinds["response"] = background.job_kind(state.responses_store)
    # An interactive request preempts a batch item for its slot (the scheduler's priority): a batch fills them all.
    concurrency = state.config.batch_concurrency or state.config.parallel
    plane.runner = JobRunner(plane.store, InProcessDispatch(app, state), kinds, concurrency, sweep=plane.files.sweep)
    plane.runner.start()
    return plane.runner
