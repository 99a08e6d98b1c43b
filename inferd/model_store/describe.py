"""What a model is, read from its files without loading it: format,
architecture, parameter count, quantization, context length, chat template,
licence and capabilities. GGUF from its header; a Hugging Face folder from
config.json, the safetensors headers and the tokenizer config."""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from inferd.model_store.speech import is_piper_voice, is_whisper_folder
from inferd.models.encoder_config import model_kind
from inferd.models.gguf_file import VOCABULARY_ARRAYS, GGUFError, GGUFFile

# The files a Hugging Face model folder needs to be loaded and chatted with;
# a repository's README, images, ONNX or other exports are left out.
FOLDER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "tokenizer.model", "chat_template.jinja", "chat_template.json",
                "vocab.json", "merges.txt", "model.safetensors.index.json", "modules.json",
                "sentence_bert_config.json", "config_sentence_transformers.json")
_POOLING = re.compile(r"^\d+_Pooling/config\.json$")

_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


@dataclass
class ModelFacts:
    format: str
    architecture: str | None = None
    parameter_count: int | None = None
    quantization: str | None = None
    context_length: int | None = None
    chat_template: bool = False
    license: str | None = None
    capabilities: list[str] = field(default_factory=list)


def folder_file_wanted(name: str) -> bool:
    """Whether a file of a Hugging Face repository belongs in the stored model."""
    return name in FOLDER_FILES or (name.endswith(".safetensors") and "/" not in name) or bool(_POOLING.match(name))


def describe(path: Path) -> ModelFacts:
    """`path`: a .gguf file, a Hugging Face folder, or a speech model (`speech.py`)."""
    if is_piper_voice(path):
        return ModelFacts(format="piper", architecture="vits", capabilities=["speech"])
    if is_whisper_folder(path):
        return ModelFacts(format="ctranslate2", architecture="whisper", capabilities=["transcription"])
    return describe_gguf(path) if path.is_file() else describe_folder(path)


def describe_gguf(path: Path) -> ModelFacts:
    try:
        gguf = GGUFFile(path, skip=VOCABULARY_ARRAYS)
    except GGUFError as error:
        raise ValueError(str(error)) from None
    meta = gguf.metadata
    arch = meta.get("general.architecture")
    template = meta.get("tokenizer.chat_template") or ""
    params = sum(math.prod(t.shape) for t in gguf.tensors.values())
    facts = ModelFacts(
        format="gguf", architecture=arch, parameter_count=params or None,
        quantization=gguf_quantization(meta.get("general.file_type"), gguf),
        context_length=meta.get(f"{arch}.context_length"), chat_template=bool(template),
        license=meta.get("general.license"),
    )
    facts.capabilities = _capabilities(template, embedding=meta.get(f"{arch}.pooling_type") is not None)
    return facts


def gguf_quantization(file_type: int | None, gguf: GGUFFile) -> str | None:
    """llama.cpp's name of the file type (Q4_K_M), else the commonest tensor type."""
    from gguf import LlamaFileType

    if file_type is not None:
        try:
            return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    kinds = [t.qtype.name for t in gguf.tensors.values()]
    return max(set(kinds), key=kinds.count) if kinds else None


def describe_folder(folder: Path) -> ModelFacts:
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder} has no config.json; a Hugging Face model folder needs one")
    config = json.loads(config_file.read_text())
    text = {**config, **(config.get("text_config") or {})}
    archs = config.get("architectures") or []
    template = _folder_template(folder)
    quant = (config.get("quantization_config") or {}).get("quant_method")
    dtype = text.get("torch_dtype") or text.get("dtype")
    embedding = (folder / "modules.json").is_file() or (bool(archs) and not any(
        a.endswith(("ForCausalLM", "ForConditionalGeneration")) for a in archs))
    return ModelFacts(
        format="safetensors",
        architecture=text.get("model_type") or (archs[0] if archs else None),
        parameter_count=_safetensors_parameters(folder) or None,
        quantization=quant.upper() if isinstance(quant, str) else _DTYPES.get(dtype, dtype),
        context_length=text.get("max_position_embeddings"),
        chat_template=bool(template),
        license=_readme_license(folder),
        # A cross-encoder (a sequence-classification head on an encoder) scores pairs: it reranks, not embeds.
        capabilities=["rerank"] if model_kind(config) == "rerank" else _capabilities(template, embedding),
    )


def _capabilities(template: str, embedding: bool) -> list[str]:
    if embedding:
        return ["embeddings"]
    # Chat works without a template of the model's own (inferd falls back to a plain transcript).
    found = ["completion", "chat"]
    if "tools" in template:
        found.append("tools")
    return found


def _folder_template(folder: Path) -> str:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    for name in ("chat_template.json", "tokenizer_config.json"):
        try:
            template = json.loads((folder / name).read_text()).get("chat_template")
        except (OSError, ValueError):
            continue
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = " ".join(t.get("template", "") for t in template if isinstance(t, dict))
        if isinstance(template, str) and template:
            return template
    return ""


def _safetensors_parameters(folder: Path) -> int:
    """Elements of every tensor, from each file's JSON header (8-byte length, then the header)."""
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def _readme_license(folder: Path) -> str | None:
    """The `license:` of a model card's front matter, when the folder has one."""
    try:
        text = (folder / "README.md").read_text(errors="replace")
    except OSError:
        return None
    match = re.match(r"---\n(.*?)\n---", text, re.S)
    found = re.search(r"^license:\s*(\S+)", match.group(1), re.M) if match else None
    return found.group(1).strip("'\"") if found else None
