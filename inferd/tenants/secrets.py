"""A key's secret: 256 random bits behind a recognisable prefix. Only its
SHA-256 is ever stored; a secret this long needs no slow hash, since nobody
can guess one, and a fixed-size digest makes lookups one dict probe."""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "inferd-"
SHOWN = 6  # characters of the random part kept for display


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str | bytes) -> str:
    data = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(data).hexdigest()


def display_prefix(secret: str) -> str:
    """What listings show of a secret: enough to tell keys apart, never enough to use one."""
    return secret[:len(PREFIX) + SHOWN] + "..."
