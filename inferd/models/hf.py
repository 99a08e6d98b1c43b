"""Hugging Face model folders: config.json and *.safetensors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open


def read_hf_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; a Hugging Face model folder needs one")
    return json.loads(path.read_text())


def iter_safetensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors weights")
    for file in files:
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def count_safetensors(folder: Path) -> int:
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            total += len(f.keys())
    return total
