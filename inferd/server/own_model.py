"""The server's own chat model (its first --model, loaded at start) under
Ollama's `keep_alive`: it stays unless a request says otherwise; `0` unloads
it once no request runs on it, a duration once it has been idle that long,
as any model loaded on demand. From then on the model host holds it
(`ModelHost.adopt_own`): a request that means it (by a name of its, with no
name, or as the one model served) loads it again, on demand, and it stays
loaded until a request's keep_alive says otherwise.

A chat model also pooled for embeddings (--pooling) stays: the embeddings
routes use it outside any request's choice."""

from __future__ import annotations

from pathlib import Path

from inferd.http.errors import BadRequest
from inferd.serving.model_host import ChatModel, HostedModel, ModelHost
from inferd.serving.served_models import CHAT
from inferd.serving.state import ServerState

PARTS = ("engine", "loaded", "template", "grammar", "tool_parser", "think_markers")


def means_own(state: ServerState, name: object) -> bool:
    """A chat request naming `name` (or none) runs on the server's own chat model."""
    if not isinstance(name, str) or not name:
        return True
    names = state.served_names
    if name in names or name.removesuffix(":latest") in names:
        return True
    meant = state.served.meant(name)
    return meant is not None and meant.name == state.model_name


def check_unloadable(state: ServerState) -> None:
    own = state.served.named(state.model_name)
    if own is not None and own.pooled is not None:
        raise BadRequest(f"model {state.model_name!r} also computes embeddings here (--pooling): it stays loaded "
                         "for the server's life", param="keep_alive")


async def unload_own_when_idle(state: ServerState, host: ModelHost, reason: str = "requested") -> bool:
    """Unload the server's own model now when nothing runs on it, else once the last request on it ends;
    True when it was unloaded now."""
    engine = state.engine
    if host.own is not None or engine is None:
        return False
    if host.own_requests > 0 or engine._streams:
        host.own_unload_wanted = True
        return False
    host.own_unload_wanted = False
    parts = ChatModel(state.config, tuple(state.served_names), **{name: getattr(state, name) for name in PARTS})
    model = HostedModel(state.model_name, state.config.model, _bytes(Path(parts.loaded.path)),
                        aliases=tuple(state.served_names[1:]), kind=CHAT)
    for name in PARTS:  # from here on, requests for it go to the host, which loads it again
        setattr(state, name, None)
    await host.adopt_own(model, parts, reason)
    return True


def follow_own_keep_alive(state: ServerState, host: ModelHost) -> None:
    """A request's keep_alive past which the server's own model is idle unloads it (the host's sweep)."""
    async def expired():
        await unload_own_when_idle(state, host, "expired")

    host.own_expired = expired


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
