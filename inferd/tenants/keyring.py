"""The keys a server accepts, in memory: the stored keys (write-through to
the `KeyStore` when there is one) and the bootstrap keys from the command
line, which are admin keys without limits, never stored and never edited.

A presented secret is found by its SHA-256 in one dict probe, then its digest
compared with `hmac.compare_digest`: the time taken depends on neither the
secret nor how close a guess came."""

from __future__ import annotations

import dataclasses
import hmac
import threading
import time
from collections.abc import Callable, Iterable

from inferd.tenants.keys import ApiKey, InvalidField, check_name
from inferd.tenants.secrets import display_prefix, hash_secret, new_secret
from inferd.tenants.store import DuplicateKey, KeyStore


class KeyNotFound(LookupError):
    pass


class LastAdminKey(Exception):
    """Removing or demoting this key would leave nobody able to manage keys."""


class KeyRing:
    def __init__(self, store: KeyStore | None = None, bootstrap: Iterable[str] = ()):
        self.store = store
        # Told of every change made here (the key, or None and the name when removed): replicas share them.
        self.on_change: Callable[[str, ApiKey | None], None] | None = None
        self._lock = threading.Lock()
        self._by_hash: dict[str, ApiKey] = {}
        self._by_name: dict[str, ApiKey] = {}
        self._last_used: dict[str, float] = {}  # since the last flush
        for secret in bootstrap:
            h = hash_secret(secret)
            self._put(ApiKey(name=f"bootstrap-{h[:8]}", secret_hash=h, prefix=display_prefix(secret), admin=True,
                             bootstrap=True))
        for key in store.keys() if store is not None else ():
            self._put(key)

    def __len__(self) -> int:
        return len(self._by_name)

    def _put(self, key: ApiKey) -> None:
        self._by_hash[key.secret_hash] = key
        self._by_name[key.name] = key

    def _drop(self, key: ApiKey) -> None:
        self._by_hash.pop(key.secret_hash, None)
        self._by_name.pop(key.name, None)

    def find(self, secret: bytes) -> ApiKey | None:
        digest = hash_secret(secret)
        key = self._by_hash.get(digest)
        if key is None or not hmac.compare_digest(digest, key.secret_hash):
            return None
        return key

    def get(self, name: str) -> ApiKey:
        key = self._by_name.get(name)
        if key is None:
            raise KeyNotFound(f"no key named {name!r}; GET /api/keys lists them")
        return key

    def all(self) -> list[ApiKey]:
        return sorted(self._by_name.values(), key=lambda k: (not k.bootstrap, k.name))

    def used(self, key: ApiKey, now: float) -> None:
        if not key.bootstrap:
            self._last_used[key.name] = now

    def last_used(self, key: ApiKey) -> float | None:
        return self._last_used.get(key.name, key.last_used_at)

    def take_last_used(self) -> dict[str, float]:
        """Last-used times since the previous call, for the store; the records follow them."""
        with self._lock:
            taken, self._last_used = self._last_used, {}
            # Every key used in the last second, each flush: one field replaced, not `changed` (limits rebuilt too).
            for name, t in taken.items():
                key = self._by_name.get(name)
                if key is not None:
                    self._put(dataclasses.replace(key, last_used_at=t))
        return taken

    # -- management ----------------------------------------------------------
    def add(self, name: str, changes: dict) -> tuple[ApiKey, str]:
        """A new key and its secret (shown this once)."""
        check_name(name)
        secret = new_secret()
        key = ApiKey(name=name, secret_hash=hash_secret(secret), prefix=display_prefix(secret)).changed(changes)
        with self._lock:
            if name in self._by_name:
                raise DuplicateKey(f"a key named {name!r} already exists; PATCH it or pick another name")
            if self.store is not None:
                self.store.insert(key)
            self._put(key)
        self._changed(name, key)
        return key, secret

    def update(self, name: str, changes: dict) -> ApiKey:
        with self._lock:
            old = self._editable(name)
            new = old.changed(changes)
            if old.admin and (not new.admin or new.disabled):
                self._check_not_last_admin(old)
            if self.store is not None:
                self.store.replace(new)
            self._drop(old)
            self._put(new)
        self._changed(name, new)
        return new

    def rotate(self, name: str) -> tuple[ApiKey, str]:
        """A new secret for the key; the old one stops working at once."""
        secret = new_secret()
        with self._lock:
            old = self._editable(name)
            new = old.changed({"secret_hash": hash_secret(secret), "prefix": display_prefix(secret)})
            if self.store is not None:
                self.store.replace(new)
            self._drop(old)
            self._put(new)
        self._changed(name, new)
        return new, secret

    def remove(self, name: str) -> None:
        with self._lock:
            key = self._editable(name)
            if key.admin:
                self._check_not_last_admin(key)
            if self.store is not None:
                self.store.delete(name)
            self._drop(key)
        self._changed(name, None)

    def _changed(self, name: str, key: ApiKey | None) -> None:
        if self.on_change is not None:
            self.on_change(name, key)

    def apply(self, name: str, key: ApiKey | None) -> None:
        """A change another replica made (a shared record, or None when removed): taken as it is, not passed on."""
        with self._lock:
            old = self._by_name.get(name)
            if old is not None and old.bootstrap:
                return
            if key is None:
                if old is not None:
                    self._drop(old)
                    if self.store is not None:
                        self.store.delete(name)
                return
            if old is not None:
                key = key.changed({"last_used_at": max(old.last_used_at or 0, key.last_used_at or 0) or None})
                self._drop(old)
            self._put(key)
            if self.store is not None:
                self.store.replace(key)

    def reload(self) -> list[tuple[str, ApiKey | None]]:
        """Take the store's keys as they are now, when another process has changed them: each
        key added, edited, rotated or removed there (passed on like a change made here)."""
        changed: list[tuple[str, ApiKey | None]] = []
        with self._lock:  # held while reading the store too: a change made here meanwhile is not undone
            stored = {k.name: k for k in self.store.keys()}
            for name, old in list(self._by_name.items()):
                if old.bootstrap:
                    continue
                new = stored.pop(name, None)
                if new is None:
                    self._drop(old)
                    changed.append((name, None))
                    continue
                used = max(old.last_used_at or 0, new.last_used_at or 0) or None
                new = new.changed({"last_used_at": used})
                if new != old.changed({"last_used_at": used}):
                    self._drop(old)
                    self._put(new)
                    changed.append((name, new))
            for name, new in stored.items():
                if name not in self._by_name:
                    self._put(new)
                    changed.append((name, new))
        for name, key in changed:
            self._changed(name, key)
        return changed

    def stored(self) -> list[ApiKey]:
        """The managed keys (no bootstrap ones)."""
        return [k for k in self._by_name.values() if not k.bootstrap]

    def _editable(self, name: str) -> ApiKey:
        key = self.get(name)
        if key.bootstrap:
            raise InvalidField("name", f"{name!r} comes from --api-key/--api-key-file/INFERD_API_KEY; "
                                       "change it there and restart")
        return key

    def _check_not_last_admin(self, key: ApiKey) -> None:
        now = time.time()
        others = [k for k in self._by_name.values()
                  if k.admin and k.name != key.name and not k.disabled and not k.expired(now)]
        if not others:
            raise LastAdminKey(f"{key.name!r} is the last admin key: add another admin key first, "
                               "or nobody could manage keys any more")
