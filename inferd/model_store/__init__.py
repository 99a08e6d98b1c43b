"""The model store: models as things inferd manages, by name.

Under `<data dir>/models/`: content-addressed blobs (`blobs/sha256-<hex>`),
one manifest per `name:tag` (`manifests/`), derived views that give a loader
the file or folder it expects (`views/`), partial downloads (`partial/`) and
the locks that let pulls and removals in several processes share the store
(`locks/`). See `store.ModelStore` for what a server or command asks of it:
the stored models with their manifests, and a name resolved to files.

Torch-free: listing models or resolving a name loads no engine.
"""

from inferd.model_store.errors import (BadModelName, IntegrityError, ModelNotStored, NotEnoughSpace, Refused,
                                       StoreError)
from inferd.model_store.manifest import Manifest, StoredFile
from inferd.model_store.names import ModelName
from inferd.model_store.store import ModelStore

__all__ = ["BadModelName", "IntegrityError", "Manifest", "ModelName", "ModelNotStored", "ModelStore",
           "NotEnoughSpace", "Refused", "StoreError", "StoredFile"]
