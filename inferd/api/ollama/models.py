"""Model names as Ollama clients send them: "name" or "name:tag"."""

from __future__ import annotations

from inferd.http.errors import NotFound
from inferd.serving.state import ServerState

DEFAULT_TAG = ":latest"


def check_model(state: ServerState, requested: str) -> None:
    """Accept a served name, with or without Ollama's default tag."""
    name = requested.removesuffix(DEFAULT_TAG)
    if name not in state.served_names and state.served.meant(name) is None:
        served = ", ".join(f'"{n}"' for n in state.every_name())
        raise NotFound(f'model "{requested}" not found; this server serves {served}', param="model")
