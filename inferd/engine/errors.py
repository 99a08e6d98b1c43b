"""What the engine raises to its callers. Torch-free, so the HTTP side can
map them to responses without importing the engine."""

from __future__ import annotations


class RequestRejected(ValueError):
    """The request can never run as asked; the message names the numbers."""


class QueueFullError(RuntimeError):
    """The waiting queue is at --max-queue; retry later."""


class EngineDeadError(RuntimeError):
    """The engine loop has stopped; no request can be served."""
