"""A manifest: everything the store knows about one `name:tag`, as JSON.

Files are named by their path in the model (`config.json`,
`model-Q4_K_M.gguf`) and kept as blobs named by their sha256; a file with a
`path` lives outside the store (the bundled model's file, which the store
records rather than copies).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from inferd.model_store.names import ModelName

SCHEMA = 1
FORMATS = ("gguf", "safetensors")


@dataclass(frozen=True)
class StoredFile:
    name: str  # its path in the model, '/'-separated
    size: int
    sha256: str
    path: str | None = None  # kept outside the store; None = the blob sha256-<hex>

    @property
    def blob(self) -> str:
        return f"sha256-{self.sha256}"


@dataclass
class Manifest:
    name: str
    tag: str
    format: str  # "gguf" (one file) or "safetensors" (a Hugging Face folder)
    files: list[StoredFile]
    source: dict  # {"type": "huggingface"|"import"|"bundled", ...}: where the bytes came from
    architecture: str | None = None
    parameter_count: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    chat_template: bool = False
    license: str | None = None
    capabilities: list[str] = field(default_factory=list)  # completion, chat, tools, embeddings
    created_at: str = field(default_factory=lambda: now_iso())

    @property
    def model_name(self) -> ModelName:
        return ModelName(self.name, self.tag)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def model_file(self) -> StoredFile | None:
        """A GGUF model's one file."""
        return next((f for f in self.files if f.name.endswith(".gguf")), None) if self.format == "gguf" else None

    def to_json(self) -> str:
        body = {"schema": SCHEMA, **asdict(self)}
        body["files"] = [{k: v for k, v in asdict(f).items() if v is not None} for f in self.files]
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    @property
    def digest(self) -> str:
        """What the model is, as bytes: the same files give the same digest whatever the name."""
        key = json.dumps(sorted((f.name, f.sha256) for f in self.files))
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("schema") != SCHEMA:
            raise ValueError(f"not a schema-{SCHEMA} manifest")
        body.pop("schema")
        body["files"] = [StoredFile(**f) for f in body["files"]]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in body.items() if k in known})

    def renamed(self, name: ModelName) -> "Manifest":
        return Manifest(**{**self.__dict__, "name": name.name, "tag": name.tag, "created_at": now_iso()})


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
