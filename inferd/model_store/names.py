"""Model names as people type them.

    name[:tag]            a stored model (tag `latest` when left out)
    owner/repo            a Hugging Face repository's safetensors folder
    owner/repo:Q4_K_M     the GGUF file of that quantization in the repository

`hf.co/` and `huggingface.co/` before a repository are accepted and dropped,
as Ollama accepts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferd.model_store.errors import BadModelName

DEFAULT_TAG = "latest"
HUB_PREFIXES = ("hf.co/", "huggingface.co/", "https://huggingface.co/")

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_NAME = re.compile(rf"(?:{_PART}/)?{_PART}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, order=True)
class ModelName:
    name: str
    tag: str = DEFAULT_TAG

    @classmethod
    def parse(cls, text: str) -> "ModelName":
        raw = text.strip() if isinstance(text, str) else ""
        for prefix in HUB_PREFIXES:
            if raw.lower().startswith(prefix):
                raw = raw[len(prefix):]
                break
        name, colon, tag = raw.partition(":")
        tag = tag or ("" if colon else DEFAULT_TAG)
        if not _NAME.fullmatch(name) or not _TAG.fullmatch(tag) or name.endswith((".", "-")) or ".." in name:
            raise BadModelName(
                f"{text!r} is not a model name: use name[:tag] (letters, digits, '.', '_', '-'), "
                "or owner/repo[:QUANT] for a Hugging Face repository (e.g. Qwen/Qwen3-0.6B or "
                "unsloth/Qwen3-0.6B-GGUF:Q4_K_M)"
            )
        return cls(name, tag)

    @property
    def full(self) -> str:
        return f"{self.name}:{self.tag}"

    @property
    def short(self) -> str:
        """What a person would type: the tag left out when it is `latest`."""
        return self.name if self.tag == DEFAULT_TAG else self.full

    @property
    def is_hub_repo(self) -> bool:
        return "/" in self.name

    def __str__(self) -> str:
        return self.full
