"""The key record and what may be asked of it: a name, the hash of its secret,
scopes (models it may use; none = all), admin or not, limits (0 = unlimited),
an optional expiry, a disabled flag, and when it was made and last used.

`changes_from(body)` reads a create or update request; a bad field is an
`InvalidField` naming it (the HTTP layer's 400 with `param`)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
LIMIT_FIELDS = ("rpm", "tpm", "daily_tokens", "max_concurrent")
EDITABLE = ("scopes", "admin", "disabled", "expires_at", *LIMIT_FIELDS)
MAX_SCOPES = 256


class InvalidField(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Limits:
    rpm: int = 0  # requests per minute
    tpm: int = 0  # tokens (prompt + completion) per minute
    daily_tokens: int = 0  # tokens per UTC day
    max_concurrent: int = 0  # requests in flight at once

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ApiKey:
    name: str
    secret_hash: str
    prefix: str
    scopes: tuple[str, ...] = ()
    admin: bool = False
    limits: Limits = Limits()
    expires_at: float | None = None
    disabled: bool = False
    created_at: float = field(default_factory=time.time)
    last_used_at: float | None = None
    bootstrap: bool = False  # from --api-key / --api-key-file / INFERD_API_KEY: never stored, never edited

    def may_use(self, model: str) -> bool:
        return not self.scopes or model in self.scopes

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def public(self) -> dict:
        """The key as listings show it: no hash, no secret."""
        return {
            "name": self.name, "prefix": self.prefix, "scopes": list(self.scopes), "admin": self.admin,
            "limits": self.limits.as_dict(), "expires_at": self.expires_at, "disabled": self.disabled,
            "created_at": self.created_at, "last_used_at": self.last_used_at, "bootstrap": self.bootstrap,
        }

    def record(self) -> dict:
        """What replicas share (etcd): everything but a secret, which is never kept."""
        return {**self.public(), "secret_hash": self.secret_hash}

    @classmethod
    def from_record(cls, record: Mapping) -> ApiKey:
        """Raises ValueError (naming the field) on a record that does not fit."""
        try:
            return cls(name=check_name(record["name"]), secret_hash=str(record["secret_hash"]),
                       prefix=str(record["prefix"]), scopes=tuple(record.get("scopes") or ()),
                       admin=bool(record.get("admin")), limits=Limits(**(record.get("limits") or {})),
                       expires_at=record.get("expires_at"), disabled=bool(record.get("disabled")),
                       created_at=float(record.get("created_at") or 0), last_used_at=record.get("last_used_at"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a key record: {e}") from None

    def changed(self, changes: Mapping) -> ApiKey:
        limits = dataclasses.replace(self.limits, **{k: v for k, v in changes.items() if k in LIMIT_FIELDS})
        rest = {k: v for k, v in changes.items() if k not in LIMIT_FIELDS}
        return dataclasses.replace(self, limits=limits, **rest)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidField("name", "must be 1-64 characters of A-Z, a-z, 0-9, '.', '_' or '-'")
    return name


def changes_from(body: Mapping, *, creating: bool) -> dict:
    """The fields of a create (POST) or update (PATCH) body, checked. Limits may
    sit at the top level or under "limits"; expiry is `expires_at` (Unix
    seconds) or `expires_in` (seconds from now); null clears it."""
    if not isinstance(body, Mapping):
        raise InvalidField("body", "must be a JSON object")
    flat = dict(body)
    nested = flat.pop("limits", None)
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise InvalidField("limits", "must be an object of rpm, tpm, daily_tokens, max_concurrent")
        for k, v in nested.items():
            flat[k if k in LIMIT_FIELDS else f"limits.{k}"] = v
    allowed = {"name", "expires_in", *EDITABLE} if creating else {"expires_in", *EDITABLE}
    unknown = sorted(k for k in flat if k not in allowed)
    if unknown:
        raise InvalidField(unknown[0], f"unknown field; allowed: {', '.join(sorted(allowed))}")
    out: dict = {}
    if "scopes" in flat:
        scopes = flat["scopes"]
        if scopes is None:
            scopes = []
        named = isinstance(scopes, list) and all(isinstance(s, str) and s for s in scopes)
        if not named or len(scopes) > MAX_SCOPES:
            raise InvalidField("scopes", f"must be a list of model names (at most {MAX_SCOPES}); "
                                         "empty allows every model")
        out["scopes"] = tuple(dict.fromkeys(scopes))
    for flag in ("admin", "disabled"):
        if flag in flat:
            if not isinstance(flat[flag], bool):
                raise InvalidField(flag, "must be true or false")
            out[flag] = flat[flag]
    for name in LIMIT_FIELDS:
        if name in flat:
            value = flat[name]
            if value is None:
                value = 0
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53:
                raise InvalidField(name, "must be a whole number >= 0 (0 = unlimited)")
            out[name] = value
    if "expires_at" in flat and "expires_in" in flat:
        raise InvalidField("expires_in", "give expires_at or expires_in, not both")
    if "expires_at" in flat:
        out["expires_at"] = _seconds(flat["expires_at"], "expires_at")
    if "expires_in" in flat:
        seconds = _seconds(flat["expires_in"], "expires_in")
        out["expires_at"] = None if seconds is None else time.time() + seconds
    return out


def _seconds(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e11:
        raise InvalidField(field, "must be a positive number of seconds, or null for no expiry")
    return float(value)
