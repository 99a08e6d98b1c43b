"""`ModelStore`: the stored models, their manifests, and names resolved to
the files a loader reads. Everything a many-model server needs to know of the
store is here: `models()` lists them, `resolve(name)` gives the path to load.

Writes take the store lock (`locks/store.lock`, a file lock, so that commands
and servers on one data dir share it): a pull's last step (blobs in, manifest
written) and a removal's sweep of blobs no manifest names never interleave.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from filelock import FileLock

from inferd.model_store.blobs import Blobs
from inferd.model_store.bundled import BUNDLED, bundled_manifest, is_current
from inferd.model_store.errors import IntegrityError, ModelNotStored, Refused, StoreError
from inferd.model_store.hashing import sha256_of
from inferd.model_store.layout import data_dir
from inferd.model_store.manifest import Manifest, StoredFile
from inferd.model_store.names import ModelName

log = logging.getLogger(__name__)

ABANDONED_AFTER = 7 * 24 * 3600.0  # seconds a partial download is kept for a pull to resume it


class ModelStore:
    def __init__(self, root: str | os.PathLike, bundled: bool = True):
        self.root = Path(root)
        self.blobs = Blobs(self.root / "blobs")
        self.manifests = self.root / "manifests"
        self.views = self.root / "views"
        self.partial = self.root / "partial"
        self.locks = self.root / "locks"
        self._bundled_pending = bundled

    @classmethod
    def open(cls, data_dir_option: str | os.PathLike | None = None) -> "ModelStore":
        return cls(data_dir(data_dir_option) / "models")

    # -- reading -----------------------------------------------------------------

    def models(self) -> list[Manifest]:
        """Every stored model, by name."""
        self._seed_bundled()
        found = []
        for file in sorted(self.manifests.glob("*.json")) if self.manifests.is_dir() else ():
            manifest = self._read(file)
            if manifest is not None:
                found.append(manifest)
        return sorted(found, key=lambda m: m.model_name)

    def get(self, name: str | ModelName) -> Manifest | None:
        """The model stored as `name`, else the one Hugging Face repository stored under that
        repository's own name (`all-minilm-l6-v2` finds sentence-transformers/all-MiniLM-L6-v2)."""
        self._seed_bundled()
        parsed = _parsed(name)
        file = self._manifest_path(parsed)
        return self._read(file) if file.is_file() else self._by_repo_name(parsed)

    def require(self, name: str | ModelName) -> Manifest:
        manifest = self.get(name)
        if manifest is None:
            raise ModelNotStored(_parsed(name).short, [m.model_name.short for m in self.models()])
        return manifest

    def file_paths(self, manifest: Manifest) -> dict[str, Path]:
        """Each file's bytes: its blob, or where an outside file lies."""
        return {f.name: Path(f.path) if f.path else self.blobs.path(f.sha256) for f in manifest.files}

    def resolve(self, name: str | ModelName) -> Path:
        """What a loader reads for `name`: the .gguf file, or the folder of a safetensors model."""
        return self.view(self.require(name))

    def view(self, manifest: Manifest) -> Path:
        """The model laid out as its files' names, as links to the blobs (made once per content)."""
        paths = self.file_paths(manifest)
        missing = [name for name, path in paths.items() if not path.is_file()]
        if missing:
            raise IntegrityError(f"model {manifest.model_name.short!r} is damaged: {', '.join(missing)} missing from "
                                 f"the store; `inferd pull --verify` or `inferd rm` then pull or import it again")
        if manifest.format == "gguf" and manifest.files[0].path:
            return paths[manifest.files[0].name]  # an outside file is loaded where it lies
        folder = self.views / manifest.digest[:32]
        for name, blob in paths.items():
            link = folder / name
            target = os.path.relpath(blob, link.parent)
            if link.is_symlink() and os.readlink(link) == target:
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            temporary = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}")
            os.symlink(target, temporary)
            os.replace(temporary, link)
        return folder / manifest.model_file.name if manifest.format == "gguf" else folder

    # -- writing -----------------------------------------------------------------

    def lock(self, name: str = "store") -> FileLock:
        self.locks.mkdir(parents=True, exist_ok=True)
        return FileLock(self.locks / f"{name}.lock")

    def write(self, manifest: Manifest) -> None:
        """Record `manifest` (its blobs already in place), replacing one of the same name."""
        if manifest.model_name == BUNDLED and manifest.source.get("type") != "bundled":
            raise Refused(f"{BUNDLED.short!r} names the bundled model; store this one under another name")
        self.manifests.mkdir(parents=True, exist_ok=True)
        file = self._manifest_path(manifest.model_name)
        temporary = file.with_name(f".{file.name}.{uuid.uuid4().hex[:8]}")
        temporary.write_text(manifest.to_json())
        os.replace(temporary, file)

    def copy(self, source: str | ModelName, destination: str | ModelName) -> Manifest:
        """A second name for the same bytes: a new manifest, no bytes copied."""
        target = _parsed(destination)
        with self.lock():
            copied = self.require(source).renamed(target)
            self.write(copied)
        return copied

    def remove(self, name: str | ModelName) -> Manifest:
        """Forget `name`; blobs no other manifest names are deleted."""
        parsed = _parsed(name)
        if parsed == BUNDLED:
            raise Refused(f"{BUNDLED.short!r} is the bundled model: it comes with inferd, takes no space in the "
                             "store and stays; `inferd cp` gives it another name")
        with self.lock():
            manifest = self.require(parsed)
            if manifest.model_name != parsed:  # only the name itself removes a model
                raise ModelNotStored(parsed.short, [m.model_name.short for m in self.models()])
            self._manifest_path(parsed).unlink()
            self._sweep()
        return manifest

    def verify(self, name: str | ModelName, on_bytes: Callable[[int], None] | None = None) -> list[StoredFile]:
        """Re-hash every file of `name`; the files whose bytes do not match (or are gone)."""
        manifest = self.require(name)
        bad = []
        for file, path in zip(manifest.files, self.file_paths(manifest).values()):
            try:
                ok = sha256_of(path, on_bytes) == file.sha256
            except OSError:
                ok = False
            if not ok:
                bad.append(file)
        return bad

    # -- internals ---------------------------------------------------------------

    def _by_repo_name(self, name: ModelName) -> Manifest | None:
        if name.is_hub_repo:
            return None
        found = [m for m in self.models() if m.model_name.is_hub_repo and m.tag == name.tag
                 and m.name.rsplit("/", 1)[1].lower() == name.name.lower()]
        return found[0] if len(found) == 1 else None

    def _manifest_path(self, name: ModelName) -> Path:
        return self.manifests / (quote(name.full, safe="") + ".json")

    def _read(self, file: Path) -> Manifest | None:
        try:
            return Manifest.from_json(file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as error:
            log.warning("ignoring unreadable manifest %s (%s); move it away or `inferd rm` the model", file, error)
            return None

    def _sweep(self) -> None:
        """Blobs and views no manifest needs (called holding the lock)."""
        manifests = [m for m in (self._read(f) for f in self.manifests.glob("*.json")) if m is not None]
        needed = {f.blob for m in manifests for f in m.files if not f.path}
        for blob in self.blobs.all():
            if blob.name not in needed:
                blob.unlink(missing_ok=True)
        views = {m.digest[:32] for m in manifests}
        for folder in self.views.iterdir() if self.views.is_dir() else ():
            if folder.name not in views:
                shutil.rmtree(folder, ignore_errors=True)
        abandoned = time.time() - ABANDONED_AFTER
        for partial in self.partial.iterdir() if self.partial.is_dir() else ():
            try:
                if partial.stat().st_mtime < abandoned:
                    partial.unlink()
            except OSError:
                pass  # another pull took it meanwhile

    def _seed_bundled(self) -> None:
        """The bundled model is in every store from its first use."""
        if not self._bundled_pending:
            return
        folder = self.root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise StoreError(f"cannot keep models under {self.root}: {folder} is a file, not a folder; "
                             "pick another --data-dir, or move what is there away")
        self._bundled_pending = False
        file = self._manifest_path(BUNDLED)
        current = self._read(file) if file.is_file() else None
        if current is not None and is_current(current):
            return
        try:
            self.write(bundled_manifest())
        except (ImportError, OSError, ValueError) as error:
            log.warning("the bundled model could not be recorded in the store at %s: %s", self.root, error)


def _parsed(name: str | ModelName) -> ModelName:
    return name if isinstance(name, ModelName) else ModelName.parse(name)
