"""Which files of a Hugging Face repository make the model a name asks for.

`owner/repo` is the repository's safetensors folder (only the files a model
needs: `describe.folder_file_wanted`), a Whisper model in CTranslate2 form
(`speech.WHISPER_FILES`), or its one GGUF file when it holds nothing else; `owner/repo:Q4_K_M` is the GGUF file of that quantization.
A quantization that is missing or matches several files is an error that
lists what the repository has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferd.model_store.describe import folder_file_wanted
from inferd.model_store.errors import BadModelName
from inferd.model_store.names import DEFAULT_TAG, ModelName
from inferd.model_store.speech import WHISPER_FILES

_SHARD = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
_QUANT = re.compile(r"(?<![A-Za-z0-9])((?:UD-)?I?Q\d[A-Z0-9_]*?|BF16|F16|F32|MXFP4(?:_MOE)?)(?=[.-]|$)", re.I)


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int
    sha256: str | None = None  # the hub's sha256 (files kept with LFS)
    blob_id: str | None = None  # the git blob id (small files, kept in git)


class QuantizationError(BadModelName):
    """The quantization asked for is not in the repository, or is ambiguous."""


def choose_files(name: ModelName, files: list[HubFile]) -> tuple[str, list[HubFile]]:
    """(format, files) for `name` among a repository's `files`."""
    ggufs = [f for f in files if f.name.endswith(".gguf") and not f.name.rsplit("/", 1)[-1].startswith("mmproj")]
    if name.tag != DEFAULT_TAG:
        matching = [f for f in ggufs if _names_quantization(f.name, name.tag)]
        if len(matching) == 1:
            return "gguf", matching
        if not matching:
            raise QuantizationError(f"{name.name} has no GGUF file of quantization {name.tag}; "
                                    f"{_present(name.name, ggufs)}")
        if all(_SHARD.search(f.name) for f in matching):
            raise QuantizationError(f"{name.full} is split into {len(matching)} GGUF files "
                                    f"({', '.join(f.name for f in matching)}); inferd loads single-file GGUF models")
        raise QuantizationError(f"{name.full} matches several GGUF files: {', '.join(f.name for f in matching)}; "
                                "name the quantization exactly")
    folder = [f for f in files if folder_file_wanted(f.name)]
    if any(f.name == "config.json" for f in folder) and any(f.name.endswith(".safetensors") for f in folder):
        return "safetensors", folder
    whisper = [f for f in files if f.name in WHISPER_FILES]
    if {"model.bin", "config.json"} <= {f.name for f in whisper}:
        return "ctranslate2", whisper
    if len(ggufs) == 1:
        return "gguf", ggufs
    if ggufs:
        raise QuantizationError(f"{name.name} holds several GGUF files; pick one by quantization, "
                                f"as {name.name}:QUANT. {_present(name.name, ggufs)}")
    listed = ", ".join(f.name for f in files) or "none"
    raise QuantizationError(f"{name.name} holds no model inferd can load (a .gguf file, or config.json with "
                            f"*.safetensors); its files: {listed}")


def quantization_of(file_name: str) -> str | None:
    found = _QUANT.findall(file_name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return found[-1].upper() if found else None


def _names_quantization(file_name: str, quant: str) -> bool:
    base = file_name.rsplit("/", 1)[-1]
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(quant)}(?![A-Za-z0-9_])", base, re.I) is not None


def _present(repo: str, ggufs: list[HubFile]) -> str:
    if not ggufs:
        return "it holds no GGUF files"
    quants = sorted({q for f in ggufs if (q := quantization_of(f.name))})
    return (f"quantizations there: {', '.join(quants) or 'none recognised'} "
            f"(files: {', '.join(f.name for f in ggufs)})")
