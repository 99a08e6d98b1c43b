"""What can go wrong with the store, each error saying what to do about it.

    StoreError              the store's own fault (unreadable, unwritable)
      ModelNotStored        a name with no manifest (also a LookupError)
      IntegrityError        bytes that do not match their sha256
      NotEnoughSpace        a pull or import that would not fit on the disk
      Refused               what the store will not do (remove the bundled model)
    BadModelName            (ValueError) a name that is not name[:tag] or owner/repo[:QUANT]
"""

from __future__ import annotations


class StoreError(Exception):
    """The store cannot do what was asked; the message says why and what to do."""


class BadModelName(ValueError):
    """A model name in no form the store knows (a client's mistake)."""


class ModelNotStored(StoreError, LookupError):
    def __init__(self, name: str, available: list[str]):
        listed = ", ".join(available) if available else "none yet"
        super().__init__(f"model {name!r} is not in the store (stored: {listed}); "
                         f"`inferd pull` fetches one from Hugging Face, `inferd import` adds a local file or folder")
        self.name, self.available = name, available


class Refused(StoreError):
    """A request the store turns down; the caller's to change."""


class IntegrityError(StoreError):
    """Bytes whose sha256 is not the one they should have."""


class NotEnoughSpace(StoreError):
    def __init__(self, needed: int, free: int, where: str):
        super().__init__(f"not enough disk space: this needs {_gb(needed)} and {where} has {_gb(free)} free; "
                         "free some space (`inferd rm` removes stored models) or pick another --data-dir")
        self.needed, self.free = needed, free


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"
