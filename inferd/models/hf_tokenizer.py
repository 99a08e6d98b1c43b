"""Loading a Tokenizer from a Hugging Face model folder.

tokenizer.json holds the tokenizer itself. The special tokens and the chat
template are spread over tokenizer_config.json, special_tokens_map.json,
chat_template.jinja / chat_template.json and generation_config.json (which
lists every id that ends generation); each is optional.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tokenizers

from inferd.models.tokenizer import Tokenizer, TokenizerLoadError


def load_hf_tokenizer(folder: Path) -> Tokenizer:
    tokenizer_file = folder / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise TokenizerLoadError(
            f"{folder} has no tokenizer.json; inferd needs the fast-tokenizer file "
            "(saving the tokenizer with a recent transformers writes it)"
        )
    try:
        inner = tokenizers.Tokenizer.from_file(str(tokenizer_file))
    except Exception as error:  # tokenizers raises a bare Exception
        raise TokenizerLoadError(f"{tokenizer_file} cannot be read: {error}") from error

    config = _read_json(folder / "tokenizer_config.json")
    special_map = _read_json(folder / "special_tokens_map.json")
    generation = _read_json(folder / "generation_config.json")

    bos_token_id = _special_token_id(inner, "bos_token", config, special_map)
    if bos_token_id is None:
        bos_token_id = _first_id(generation.get("bos_token_id"))
    eos_token_id = _special_token_id(inner, "eos_token", config, special_map)
    generation_eos = _id_list(generation.get("eos_token_id"))
    if eos_token_id is None and generation_eos:
        eos_token_id = generation_eos[0]

    add_bos = config.get("add_bos_token")
    if not isinstance(add_bos, bool):
        # No explicit setting: follow the tokenizer's own post-processor.
        add_bos = bos_token_id is not None and inner.encode("", add_special_tokens=True).ids[:1] == [bos_token_id]

    return Tokenizer(
        inner,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        add_bos=add_bos,
        chat_template=_chat_template(folder, config),
        extra_eos_ids=generation_eos,
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TokenizerLoadError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise TokenizerLoadError(f"{path} should hold a JSON object, not {type(data).__name__}")
    return data


def _special_token_id(inner: tokenizers.Tokenizer, name: str, *sources: dict[str, Any]) -> int | None:
    for source in sources:
        token = source.get(name)
        if isinstance(token, dict):  # {"content": "<s>", "lstrip": false, ...}
            token = token.get("content")
        if isinstance(token, str) and token:
            token_id = inner.token_to_id(token)
            if token_id is None:
                raise TokenizerLoadError(f"{name} {token!r} is not in tokenizer.json's vocabulary; correct {name}")
            return token_id
    return None


def _id_list(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _first_id(value: Any) -> int | None:
    ids = _id_list(value)
    return ids[0] if ids else None


def _chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    """The default chat template: chat_template.jinja, then chat_template.json, then tokenizer_config.json."""
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = _read_json(folder / "chat_template.json").get("chat_template") or config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) and template else None
