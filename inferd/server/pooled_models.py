"""Loading the models that embed or rerank into a server's roster
(`serving.served_models`): every --embedding-model, --model itself when it
is an encoder, and the chat model when --pooling asks for its embeddings."""

from __future__ import annotations

import logging

from inferd.config import ServeConfig
from inferd.engine.embedding.build import pooled_chat_model, pooled_encoder
from inferd.models.default_embedding import BUNDLED_EMBEDDING_NAMES, DEFAULT_EMBEDDING_NAME, resolve_with_bundled
from inferd.models.encoder_loader import encoder_dtype, folder_kind, load_encoder
from inferd.models.loader import LoadedModel, resolve_device
from inferd.models.pooling_config import POOLING_MODES
from inferd.serving.served_models import CHAT, EMBED, ServedModel
from inferd.serving.state import ServerState

log = logging.getLogger("inferd.serve")
CHAT_POOLING = ("none", "mean", "last")


def check_embedding_options(config: ServeConfig) -> bool:
    """Checks what can be checked before loading (raises ValueError saying
    what to change); True when --model itself is an encoder."""
    for model in config.embedding_model:
        _, path = resolve_with_bundled(model, config.data_dir)
        if folder_kind(path) == CHAT:
            raise ValueError(f"--embedding-model {model} is not an encoder (BERT family) folder; "
                             "a chat model's embeddings come from --model with --pooling")
    encoder_dtype(config.embedding_dtype, resolve_device(config.device))
    encoder = folder_kind(resolve_with_bundled(config.model, config.data_dir)[1]) != CHAT
    if config.pooling and config.pooling not in (POOLING_MODES if encoder else CHAT_POOLING):
        raise ValueError(f"--pooling {config.pooling} is not one of {', '.join(POOLING_MODES if encoder else CHAT_POOLING)}"
                         f"{'' if encoder else ' (for a chat model)'}")
    return encoder


def load_encoder_model(state: ServerState, model: str | None, main: bool = False) -> None:
    """Load an encoder folder (or the bundled one) and serve it; `main`: it is --model."""
    config = state.config
    name, path = resolve_with_bundled(model, config.data_dir)
    device = resolve_device(config.device)
    loaded = load_encoder(state.model_name if main else name, path, encoder_dtype(config.embedding_dtype, device),
                          device, config.pooling if main else None)
    pooled = pooled_encoder(loaded, config.embedding_batch_tokens, config.max_queue)
    aliases = tuple(state.served_names[1:]) if main else ()
    if name == DEFAULT_EMBEDDING_NAME:  # the bundled model answers to each of its names
        aliases += tuple(n for n in BUNDLED_EMBEDDING_NAMES if n != loaded.name)
    state.served.add(ServedModel(loaded.name, frozenset({pooled.kind}), aliases, pooled, encoder=loaded))
    log.info("loaded %s from %s: %s %s, %d layers, %s pooling, up to %d tokens, %s in %.1fs", loaded.name, path,
             loaded.config.model_type, "cross-encoder" if loaded.kind == "rerank" else "encoder",
             loaded.config.num_layers, loaded.pooling.mode, loaded.max_tokens,
             str(loaded.dtype).removeprefix("torch."), loaded.load_seconds)


def serve_chat_model(state: ServerState, loaded: LoadedModel) -> None:
    """The chat model's roster entry; with --pooling it computes embeddings too."""
    config = state.config
    tasks, pooled = {CHAT}, None
    if config.pooling:
        pooled = pooled_chat_model(loaded, state.engine, config.pooling, config.embedding_batch_tokens,
                                   config.max_queue)
        tasks.add(EMBED)
    state.served.add(ServedModel(state.model_name, frozenset(tasks), tuple(state.served_names[1:]), pooled))
