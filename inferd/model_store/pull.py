"""Pulling a model from the Hugging Face Hub into the store.

    list the repository at its current commit, choose the files (hub_files)
    check the disk has room for what is not stored yet
    each file, under its own file lock (two pulls of it share one download):
        stored already -> nothing; in huggingface_hub's cache -> taken from there;
        else downloaded to partial/<hash>.partial, resuming from its size;
        verified against the hub's sha256 (git blob id for small files),
        a mismatch deletes the partial file and ends the pull
    under the store lock: blobs in, manifest written (so a failed pull leaves none)

Progress goes to `on_progress` as Ollama reports a pull (status, digest,
total, completed); `show_bars` draws huggingface_hub's bar per file.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from filelock import Timeout

from inferd.model_store import hub
from inferd.model_store.describe import describe
from inferd.model_store.errors import BadModelName, IntegrityError, NotEnoughSpace, StoreError
from inferd.model_store.hashing import git_blob_sha1, sha256_of
from inferd.model_store.hub_files import HubFile, choose_files
from inferd.model_store.layout import free_bytes
from inferd.model_store.manifest import Manifest, StoredFile
from inferd.model_store.names import ModelName
from inferd.model_store.store import ModelStore

WAIT_POLL = 0.25  # seconds between looks at another pull's progress


@dataclass(frozen=True)
class Progress:
    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


class PullCancelled(StoreError):
    pass


def _never() -> bool:
    return False


def pull(store: ModelStore, name: str, on_progress: Callable[[Progress], None] = lambda p: None, *,
         verify: bool = False, show_bars: bool = False, cancelled: Callable[[], bool] = _never) -> Manifest:
    wanted = ModelName.parse(name)
    stored = store.get(wanted)
    if verify and stored is not None:
        _verify_stored(store, stored, on_progress)
    if not wanted.is_hub_repo:
        if stored is None:
            raise BadModelName(f"{name!r} is not stored, and inferd pulls from Hugging Face by repository: "
                               "give owner/repo (a safetensors model) or owner/repo:QUANT (a GGUF file)")
        on_progress(Progress("success"))
        return stored
    on_progress(Progress("pulling manifest"))
    listing = hub.list_repo(wanted.name)
    fmt, files = choose_files(wanted, listing.files)
    puller = _Puller(store, listing, on_progress, show_bars, cancelled)
    puller.check_space(files)
    fetched = {f.name: puller.fetch(f, stored) for f in files}
    on_progress(Progress("writing manifest"))
    manifest = puller.commit(wanted, fmt, files, fetched)
    on_progress(Progress("success"))
    return manifest


def _verify_stored(store: ModelStore, stored: Manifest, on_progress) -> None:
    """Re-hash what is stored; damaged blobs go, so the pull that follows fetches them again."""
    on_progress(Progress("verifying sha256 digest", total=stored.size, completed=0))
    bad = store.verify(stored.model_name)
    if not bad:
        return
    if stored.source.get("type") != "huggingface":
        raise IntegrityError(f"{stored.model_name.short}: {', '.join(f.name for f in bad)} no longer match "
                             "their sha256; import the model again")
    with store.lock():
        for file in bad:
            if not file.path:
                store.blobs.path(file.sha256).unlink(missing_ok=True)


class _Puller:
    def __init__(self, store: ModelStore, listing: hub.Listing, on_progress, show_bars: bool, cancelled):
        self.store, self.listing, self.on_progress = store, listing, on_progress
        self.show_bars, self.cancelled = show_bars, cancelled

    def _partial(self, file: HubFile):
        key = file.sha256 or f"git-{file.blob_id}"
        return self.store.partial / f"{key}.partial"

    def _verified(self, sha256: str):
        return self.store.partial / f"sha256-{sha256}"

    def _have(self, file: HubFile) -> bool:
        return file.sha256 is not None and (self.store.blobs.has(file.sha256) or self._verified(file.sha256).is_file())

    def check_space(self, files: list[HubFile]) -> None:
        needed = 0
        for file in files:
            if not self._have(file):
                partial = self._partial(file)
                needed += file.size - (partial.stat().st_size if partial.exists() else 0)
        free = free_bytes(self.store.root)
        if needed > free:
            raise NotEnoughSpace(needed, free, str(self.store.root))

    def fetch(self, file: HubFile, stored: Manifest | None = None) -> str:
        """The file's sha256, once its verified bytes are in partial/ or already a blob."""
        digest = f"sha256:{file.sha256}" if file.sha256 else ""
        status = f"pulling {file.name}"
        report = lambda done: self.on_progress(Progress(status, digest, file.size, min(done, file.size)))  # noqa: E731
        self.store.partial.mkdir(parents=True, exist_ok=True)
        partial = self._partial(file)
        lock = self.store.lock(f"download-{partial.stem}")
        while True:  # another pull holding the lock is downloading this file: show its progress meanwhile
            try:
                lock.acquire(timeout=WAIT_POLL)
                break
            except Timeout:
                if self.cancelled():
                    raise PullCancelled("the pull was cancelled") from None
                report(partial.stat().st_size if partial.exists() else 0)
        try:
            if self._have(file):
                report(file.size)
                return file.sha256
            unchanged = self._unchanged_small_file(file, stored)
            if unchanged is not None:
                report(file.size)
                return unchanged
            cached = hub.cached_file(self.listing, file)
            if cached is not None and cached.stat().st_size == file.size:
                _link_or_copy(cached, partial)
            elif partial.exists() and partial.stat().st_size > file.size:
                partial.unlink()  # not a prefix of this file
            report(partial.stat().st_size if partial.exists() else 0)
            hub.download(self.listing, file, partial, _progress_bar_class(report, self.show_bars, self.cancelled))
            self.on_progress(Progress("verifying sha256 digest", digest, file.size, file.size))
            return self._verify(file, partial)
        finally:
            lock.release()

    def _unchanged_small_file(self, file: HubFile, stored: Manifest | None) -> str | None:
        """A file kept in git (no sha256 from the hub) that the stored model already has with
        the same git blob id: its sha256, so an up-to-date pull fetches nothing."""
        if file.sha256 is not None or stored is None:
            return None
        kept = next((f for f in stored.files if f.name == file.name and not f.path), None)
        blob = self.store.blobs.path(kept.sha256) if kept else None
        if blob is not None and blob.is_file() and git_blob_sha1(blob) == file.blob_id:
            return kept.sha256
        return None

    def _verify(self, file: HubFile, partial) -> str:
        sha256 = sha256_of(partial)
        expected, actual = (file.sha256, sha256) if file.sha256 else (file.blob_id, git_blob_sha1(partial))
        if actual != expected:
            partial.unlink(missing_ok=True)
            kind = "sha256" if file.sha256 else "git blob id"
            raise IntegrityError(f"{file.name} from {self.listing.repo} does not match the hub's {kind} "
                                 f"({actual} != {expected}); the download was discarded, pull again")
        os.replace(partial, self._verified(sha256))
        return sha256

    def commit(self, wanted: ModelName, fmt: str, files: list[HubFile], fetched: dict[str, str]) -> Manifest:
        stored = [StoredFile(f.name, f.size, fetched[f.name]) for f in files]
        source = {"type": "huggingface", "endpoint": self.listing.endpoint, "repo": self.listing.repo,
                  "revision": self.listing.revision, "files": [f.name for f in files]}
        with self.store.lock():
            for file in stored:
                verified = self._verified(file.sha256)
                if verified.is_file():
                    self.store.blobs.adopt(verified, file.sha256, "move")
                elif not self.store.blobs.has(file.sha256):
                    raise StoreError(f"{file.name} left the store while {wanted.short} was pulled; pull again")
            draft = Manifest(name=wanted.name, tag=wanted.tag, format=fmt, files=stored, source=source)
            facts = describe(self.store.view(draft))
            facts.license = self.listing.license or facts.license
            manifest = Manifest(name=wanted.name, tag=wanted.tag, files=stored, source=source, **facts.__dict__)
            self.store.write(manifest)
        return manifest


def _link_or_copy(source, target) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _progress_bar_class(report: Callable[[int], None], show: bool, cancelled: Callable[[], bool]):
    """huggingface_hub's bar, drawn or not, that also reports bytes (at most ten times a second)."""
    from huggingface_hub.utils import tqdm

    class Bar(tqdm):
        def __init__(self, *args, **kwargs):
            if not show:
                kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.done = kwargs.get("initial") or 0
            self.reported = 0.0

        def update(self, n=1):
            self.done += n or 0
            if cancelled():
                raise PullCancelled("the pull was cancelled")
            now = time.monotonic()
            if now - self.reported >= 0.1:
                self.reported = now
                report(self.done)
            return super().update(n)

        def close(self):
            report(self.done)
            super().close()

    return Bar
