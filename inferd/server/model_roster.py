"""Which models a server loads on demand, read from its options and its
model store: every --model after the first (with the --alias names given
after it) and every stored model (chat, embedding or rerank; a GGUF
embedding model is a decoder pooled as its header says), minus those it
loads at start (its own, each --embedding-model). Names whose bytes are one model share one entry (one
load, one engine).

A stored Hugging Face repository answers to `owner/repo` and, where no other
model has it, to `repo` as written and lowercased (`all-MiniLM-L6-v2`,
`all-minilm-l6-v2`). The roster is read again when the store's manifests
change (a pull, copy or removal, by this server or by `inferd pull`), so a
model pulled while the server runs is served without a restart."""

from __future__ import annotations

import logging
from pathlib import Path

from inferd.config import ServeConfig
from inferd.model_store import ModelStore, StoreError
from inferd.model_store.speech import SPEECH_CAPABILITIES
from inferd.models.default_embedding import BUNDLED_EMBEDDING_NAMES, DEFAULT_EMBEDDING_NAME, resolve_with_bundled
from inferd.models.encoder_loader import folder_kind
from inferd.models.gguf import SUPPORTED_ARCHITECTURES
from inferd.models.gguf_file import VOCABULARY_ARRAYS, GGUFError, GGUFFile
from inferd.models.paths import resolve_model_path
from inferd.serving.model_host import HostedModel
from inferd.serving.served_models import CHAT, EMBED
from inferd.serving.state import ServerState

log = logging.getLogger("inferd.serve")

GGUF_POOLING = {1: "mean", 3: "last"}  # llama.cpp's pooling types this serves (0 none, 2 cls, 4 rank: not)


def read_roster(state: ServerState) -> list[HostedModel]:
    """Raises ModelNotFoundError on a --model that is nowhere (read on a worker thread once serving)."""
    config = state.config
    own = resolve_model_path(config.model, config.data_dir)[1].resolve()
    encoders, encoder_names = _encoders_at_start(config)
    by_path: dict[Path, HostedModel] = {}

    def add(names: list[str], source: str, path: Path, size: int, kind: str = CHAT, pooling: str | None = None) -> None:
        taken = {n for m in by_path.values() for n in m.names} | set(state.served_names) | encoder_names
        names = [n for n in dict.fromkeys(names) if n not in taken]
        if not names or path in encoders:
            return
        if path == own:
            state.same_model_names.extend(names)
        elif path in by_path:
            by_path[path].aliases += tuple(names)
        else:
            by_path[path] = HostedModel(names[0], source, size, aliases=tuple(names[1:]), kind=kind, pooling=pooling)

    for source in config.models[1:]:  # `--model X --alias A`: A is its id, X's own name answers too
        name, path = resolve_model_path(source, config.data_dir)
        add([*config.model_aliases.get(source, ()), name], source, path.resolve(), _bytes(path), folder_kind(path))
    stored = [(m, p) for m in _stored(config.data_dir)
              if not SPEECH_CAPABILITIES & set(m.capabilities)  # --whisper-model's and --voice's
              and (p := _stored_path(config.data_dir, m)) is not None]
    for manifest, path in stored:
        name = manifest.model_name
        kind = CHAT if {"chat", "completion"} & set(manifest.capabilities) else folder_kind(path)
        pooling = None
        if kind == CHAT and "embeddings" in manifest.capabilities:  # a GGUF embedding model
            pooling = gguf_pooling(path)
            if pooling is None:
                continue
            kind = EMBED
        add([name.short, name.full], name.full, path.resolve(), manifest.size, kind, pooling)
    for manifest, path in stored:  # short names last: a model's own name wins over another's short one
        repo = manifest.model_name
        if repo.is_hub_repo and path.resolve() in by_path:
            short = repo.name.rsplit("/", 1)[1] + ("" if repo.tag == "latest" else f":{repo.tag}")
            add([short, short.lower()], repo.full, path.resolve(), manifest.size)
    return list(by_path.values())


def check_aliases(state: ServerState, models: list[HostedModel]) -> None:
    """Each `--model X --alias A` pair's A names X and no stored model of other bytes (ValueError
    saying which name is taken otherwise: an alias must not hide a model)."""
    config = state.config
    stored = [(m.model_name, p.resolve()) for m in _stored(config.data_dir)
              if (p := _stored_path(config.data_dir, m)) is not None]
    for source, aliases in config.model_aliases.items():
        path = resolve_model_path(source, config.data_dir)[1].resolve()
        mine = next((m for m in models if m.source == source), None)
        names = mine.names if mine is not None else state.served_names  # X is the server's own model's bytes
        for alias in aliases:
            hidden = any(alias in (name.short, name.full) and where != path for name, where in stored)
            if alias not in names or hidden:
                raise ValueError(f"--alias {alias} (after --model {source}) is already the name of another model "
                                 "here; give it a name of its own")


def gguf_pooling(path: Path) -> str | None:
    """How a GGUF embedding model pools (its `<arch>.pooling_type`), when inferd can serve it: a decoder of an
    architecture it loads, pooled mean or last (as --pooling pools a chat model); None, logged why, otherwise."""
    try:
        meta = GGUFFile(path, skip=VOCABULARY_ARRAYS).metadata
    except (GGUFError, OSError) as error:
        log.warning("%s cannot be read as a GGUF embedding model (%s); skipped", path, error)
        return None
    arch = meta.get("general.architecture")
    pooling = GGUF_POOLING.get(meta.get(f"{arch}.pooling_type"))
    if arch not in SUPPORTED_ARCHITECTURES or pooling is None:
        log.info("%s is a GGUF embedding model of architecture %s pooled %s, which inferd does not serve "
                 "(it serves decoders of %s pooled mean or last); skipped", path.name, arch,
                 meta.get(f"{arch}.pooling_type"), ", ".join(sorted(SUPPORTED_ARCHITECTURES)))
        return None
    return pooling


def store_stamp(data_dir: str | None) -> int | None:
    """Changes whenever a manifest is written or removed (one stat: cheap enough for every lookup that misses)."""
    try:
        return ModelStore.open(data_dir).manifests.stat().st_mtime_ns
    except OSError:
        return None


def _encoders_at_start(config: ServeConfig) -> tuple[set[Path], set[str]]:
    """The paths and names of the --embedding-model models (loaded at start, not on demand)."""
    paths, names = set(), set()
    for model in config.embedding_model:
        name, path = resolve_with_bundled(model, config.data_dir)
        paths.add(path.resolve())
        names |= {model, name, *(BUNDLED_EMBEDDING_NAMES if name == DEFAULT_EMBEDDING_NAME else ())}
    return paths, names | {f"{n}:latest" for n in names}


def _stored(data_dir: str | None) -> list:
    try:
        return ModelStore.open(data_dir).models()
    except (StoreError, OSError) as error:
        log.warning("the model store cannot be read, so only the --model models are served: %s", error)
        return []


def _stored_path(data_dir: str | None, manifest) -> Path | None:
    try:
        return ModelStore.open(data_dir).resolve(manifest.model_name)
    except (StoreError, OSError):
        return None


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
