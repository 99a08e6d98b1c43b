"""Which client paths generate (and so are admitted against a key's limits):
every POST endpoint of every dialect except those that only read or count
(tokenize, count tokens, show a model, read a stored response)."""

from __future__ import annotations

from functools import cache

from inferd.api.registry import endpoints

_READ_ONLY = ("count_tokens", "input_tokens", "tokenize", "detokenize", "apply-template", "/api/show", "{",
              "/v1/files", "batches")  # a batch's items are admitted one by one as they run


@cache
def generating_paths() -> frozenset[str]:
    return frozenset(p for p, e in endpoints().items()
                     if "POST" in e.methods and not any(mark in p for mark in _READ_ONLY))


def is_generating(path: str) -> bool:
    return path in generating_paths()
