"""Encoder models (the BERT family) described from a Hugging Face config.json,
and what kind of model a folder holds: a chat model, an embedding encoder, or
a cross-encoder that scores pairs (a reranker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from inferd.models.config import UnsupportedModelError

# model_type -> how positions enter: the position id of the first token for an
# absolute table (RoBERTa-style models number from padding_idx + 1; their
# checkpoints keep the unused rows), or "rotary" (RoFormer: query and key turned
# by their position in each head, interleaved pairs; no position table).
ENCODERS = {"bert": None, "roberta": "padding", "xlm-roberta": "padding", "camembert": "padding",
            "roformer": "rotary"}
ModelKind = Literal["chat", "embed", "rerank"]
# Encoders whose layers differ from BERT's: recognised as encoders, so that loading one
# says what it is instead of failing as a chat model would.
UNSUPPORTED_ENCODERS = {
    "modernbert": "ModernBERT: local (windowed) and global attention layers in turn, gated MLPs",
    "nomic_bert": "nomic-bert: gated MLPs, rotary positions as its checkpoint's own code defines them",
    "new": "gte-new: gated MLPs, scaled rotary positions as its checkpoint's own code defines them",
}


def model_kind(hf: dict[str, Any]) -> ModelKind:
    """`rerank` for a sequence-classification head on an encoder, `embed` for a
    bare encoder, `chat` for everything else (decoders, checked when built)."""
    if hf.get("model_type") not in (*ENCODERS, *UNSUPPORTED_ENCODERS):
        return "chat"
    heads = hf.get("architectures") or []
    return "rerank" if any(name.endswith("ForSequenceClassification") for name in heads) else "embed"


@dataclass(frozen=True)
class EncoderConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    layer_norm_eps: float
    max_position_embeddings: int
    type_vocab_size: int
    hidden_act: str = "gelu"
    position_offset: int = 0  # position id of the first token (RoBERTa: padding_idx + 1)
    num_labels: int = 0  # > 0: a sequence-classification head (a cross-encoder)
    classifier_act: str = "tanh"  # between the head's two linears (BERT's pooler, RoBERTa's dense: tanh)
    rotary: bool = False  # positions turn query and key (RoFormer) instead of adding a table's row
    rotary_value: bool = False  # ... and value too
    embedding_size: int = 0  # token embeddings' width, projected to hidden_size where it differs

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def max_tokens(self) -> int:
        """The longest input the position table covers."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "EncoderConfig":
        model_type = hf.get("model_type", "")
        if model_type in UNSUPPORTED_ENCODERS:
            raise UnsupportedModelError(
                f"model_type {model_type!r} ({UNSUPPORTED_ENCODERS[model_type]}) is an encoder whose layers differ "
                f"from BERT's, which inferd does not run; encoders of BERT's shape run: {', '.join(sorted(ENCODERS))}")
        if model_type not in ENCODERS:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is not an encoder inferd runs; encoders: {', '.join(sorted(ENCODERS))}")
        positions = ENCODERS[model_type]
        position_type = hf.get("position_embedding_type", "absolute")
        if position_type != "absolute" and positions != "rotary":
            raise UnsupportedModelError(
                f"position_embedding_type {position_type!r} is not supported for model_type {model_type!r} "
                f"(absolute only; rotary positions run as model_type 'roformer')")
        rerank = model_kind(hf) == "rerank"
        offset = hf.get("pad_token_id", 1) + 1 if positions == "padding" else 0
        hidden = hf["hidden_size"]
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            hidden_act=hf.get("hidden_act", "gelu"),
            position_offset=offset,
            num_labels=(len(hf.get("id2label") or {}) or hf.get("num_labels", 2)) if rerank else 0,
            # RoFormer's head applies the model's activation where BERT's and RoBERTa's apply tanh
            classifier_act=hf.get("hidden_act", "gelu") if positions == "rotary" else "tanh",
            rotary=positions == "rotary",
            rotary_value=bool(hf.get("rotary_value", False)),
            embedding_size=(hf.get("embedding_size") or hidden) if positions == "rotary" else hidden,
        )
