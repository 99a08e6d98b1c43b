"""Tiny random-weight models with a real byte-level tokenizer, written as
Hugging Face folders, so engine tests run in seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

TINY_VOCAB = 272  # 3 specials + 256 bytes, padded


def write_byte_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda c: _byte_of(c))
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2}
    vocab.update({c: 3 + i for i, c in enumerate(byte_chars)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<eos>", "<bos>"])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "add_bos_token": True,
    }))


def _byte_of(char: str) -> int:
    # GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to 256+.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    code = ord(char)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def write_tiny_model(folder: Path, arch: str = "gemma3", seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    common = dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=2, eos_token_id=1, pad_token_id=0)
    if arch == "gemma3":
        config = transformers.Gemma3TextConfig(**common, head_dim=16, sliding_window=8,
                                                layer_types=["sliding_attention", "full_attention"])
        cls = transformers.Gemma3ForCausalLM
    else:
        config = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():  # sharper distributions than the init's, so greedy has clear winners
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    write_byte_tokenizer(folder)
    return folder
