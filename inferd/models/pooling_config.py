"""How an embedding model turns per-token states into one vector, read from
its sentence-transformers files: `modules.json` lists the pipeline (the
transformer, a Pooling module, perhaps Normalize), the Pooling module's
`config.json` its mode, `sentence_bert_config.json` the longest input.

A folder without them gets vLLM's default for encoders: the first ([CLS])
token, normalized."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inferd.models.config import UnsupportedModelError

PoolingMode = Literal["mean", "cls", "last", "max", "none"]
POOLING_MODES = ("mean", "cls", "last", "max", "none")

# Pooling config keys (older boolean spelling) -> mode.
_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
          "pooling_mode_lasttoken": "last", "pooling_mode_max_tokens": "max"}
_NAMES = {"mean": "mean", "cls": "cls", "lasttoken": "last", "max": "max"}
_PIPELINE = "sentence_transformers.models."
_UNDERSTOOD = {"Transformer", "Pooling", "Normalize"}


@dataclass(frozen=True)
class PoolingConfig:
    mode: PoolingMode
    normalize: bool
    max_tokens: int | None = None  # sentence_bert_config's max_seq_length: longer inputs are the model's limit

    def with_mode(self, mode: str | None) -> "PoolingConfig":
        if not mode:
            return self
        if mode not in POOLING_MODES:
            raise ValueError(f"--pooling must be one of {', '.join(POOLING_MODES)}, not {mode!r}")
        return PoolingConfig(mode, self.normalize, self.max_tokens)


def read_pooling_config(folder: Path) -> PoolingConfig:
    modules = _read(folder / "modules.json")
    if not isinstance(modules, list):
        return PoolingConfig("cls", normalize=True, max_tokens=_max_tokens(folder))
    mode: PoolingMode = "cls"
    normalize = False
    for module in modules:
        kind = str(module.get("type", "")).removeprefix(_PIPELINE)
        if kind not in _UNDERSTOOD:
            raise UnsupportedModelError(
                f"{folder / 'modules.json'} lists {module.get('type')!r}; inferd runs only "
                f"{', '.join(sorted(_UNDERSTOOD))} modules")
        if kind == "Pooling":
            mode = _mode(folder / module.get("path", "") / "config.json")
        normalize |= kind == "Normalize"
    return PoolingConfig(mode, normalize, _max_tokens(folder))


def _mode(path: Path) -> PoolingMode:
    config = _read(path) or {}
    if isinstance(config.get("pooling_mode"), str):  # the newer single-key spelling
        named = _NAMES.get(config["pooling_mode"])
        modes = [named] if named else [config["pooling_mode"]]
    else:
        modes = [mode for key, mode in _FLAGS.items() if config.get(key)]
        modes += [key for key, on in config.items() if on is True and key.startswith("pooling_mode_") and key not in _FLAGS]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise UnsupportedModelError(f"{path}: pooling {modes or 'unset'} is not supported; "
                                    "inferd pools one of mean, cls, lasttoken, max")
    return modes[0]


def _max_tokens(folder: Path) -> int | None:
    value = (_read(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
    return value if isinstance(value, int) and value > 0 else None


def _read(path: Path):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UnsupportedModelError(f"{path} is not valid JSON: {error}") from error
