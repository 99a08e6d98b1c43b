"""The audio extra's libraries, imported on first use: text-only servers
never load them, and a missing one is a clear error, not an ImportError."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from inferd.audio.errors import AudioNotInstalled


def require(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise AudioNotInstalled(module.split(".")[0]) from None


def check_installed(*modules: str) -> None:
    """Raise AudioNotInstalled for the first module that is not installed,
    without importing any (a request answers at once, before its upload is read)."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise AudioNotInstalled(module)
