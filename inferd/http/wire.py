"""The base of every dialect's request models: unknown fields are accepted,
so new clients keep working, and reported, so nothing is dropped silently."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    def ignored_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())
