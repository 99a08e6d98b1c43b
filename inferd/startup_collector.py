"""Python's cyclic garbage collector held off while `inferd serve` (or
`inferd router`) starts.

Importing torch, FastAPI and the server creates ~360,000 objects the
collector tracks, nearly all living as long as the process, and it traversed
them again and again as they piled up (4 full and 46 middle collections): about a quarter of the
imports' CPU time. Start-up makes almost no cyclic garbage (a full collection
after the imports frees ~7,000 objects and no memory), so the collector stays
off until the server listens. Then everything built so far is frozen (full
collections while serving no longer traverse it) and the collector runs as
before. Reference counting frees objects throughout; only cycles wait.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Stop collecting until `resume()`; does nothing where the collector is off already."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume(freeze: bool = False) -> None:
    """Collect again; undoes `pause()` only, once. `freeze`: the objects that
    exist now are never traversed again (a server that has started)."""
    global _paused
    if _paused:
        _paused = False
        if freeze:
            gc.freeze()
        gc.enable()
