"""Counting the engine's validation work, to hold it to once per request."""

from __future__ import annotations

from inferd.engine.sampling_params import SamplingParams
from inferd.engine.scheduler import Scheduler


def count_validation(monkeypatch) -> dict[str, int]:
    """Counts SamplingParams.validate and Scheduler.check_fits calls from here on."""
    counts = {"validate": 0, "check_fits": 0}
    for owner, name in ((SamplingParams, "validate"), (Scheduler, "check_fits")):
        original = getattr(owner, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    return counts
