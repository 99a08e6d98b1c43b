"""Encoder models (the BERT family) described from a Hugging Face config.json,
and what kind of model a folder holds: a chat model, an embedding encoder, or
a cross-encoder that scores pairs (a reranker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from inferd.models.config import UnsupportedModelError

# model_type -> the position id of the first token. RoBERTa-style models number
# positions from padding_idx + 1; their checkpoints keep the unused rows.
ENCODERS = {"bert": None, "roberta": "padding", "xlm-roberta": "padding", "camembert": "padding"}
ModelKind = Literal["chat", "embed", "rerank"]
# Encoders whose positions are rotary (or whose layers differ from BERT's): recognised as
# encoders, so that loading one says what it is instead of failing as a chat model would.
ROTARY_ENCODERS = ("modernbert", "nomic_bert", "roformer", "new")


def model_kind(hf: dict[str, Any]) -> ModelKind:
    """`rerank` for a sequence-classification head on an encoder, `embed` for a
    bare encoder, `chat` for everything else (decoders, checked when built)."""
    if hf.get("model_type") not in (*ENCODERS, *ROTARY_ENCODERS):
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
    classifier: Literal["bert", "roberta"] = "bert"  # pooler + linear, or dense + tanh + out_proj

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
        if model_type in ROTARY_ENCODERS:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is an encoder with rotary positions, which inferd does not run; "
                f"encoders with absolute positions run: {', '.join(sorted(ENCODERS))}")
        if model_type not in ENCODERS:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is not an encoder inferd runs; encoders: {', '.join(sorted(ENCODERS))}")
        position_type = hf.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise UnsupportedModelError(f"position_embedding_type {position_type!r} is not supported (absolute only)")
        rerank = model_kind(hf) == "rerank"
        offset = hf.get("pad_token_id", 1) + 1 if ENCODERS[model_type] == "padding" else 0
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            hidden_act=hf.get("hidden_act", "gelu"),
            position_offset=offset,
            num_labels=(len(hf.get("id2label") or {}) or hf.get("num_labels", 2)) if rerank else 0,
            classifier="bert" if model_type == "bert" else "roberta",
        )
