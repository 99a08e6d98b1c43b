"""The sampler's errors; the engine ends the rows they name."""

from __future__ import annotations


class SamplerError(ValueError):
    """The sampler's inputs do not fit together (shapes, token ids)."""


class NoValidTokenError(SamplerError):
    """Some rows have no token to pick: every logit is -inf (all banned) or NaN/inf came from the model."""

    def __init__(self, rows: list[int]) -> None:
        super().__init__(
            f"rows {rows} have no finite maximum logit: every token is banned by logit_bias/min_tokens "
            f"or the model produced NaN/inf; finish or fail those requests"
        )
        self.rows = rows
