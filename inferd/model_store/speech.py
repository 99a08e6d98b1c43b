"""Speech models in the store, for `inferd serve --whisper-model` and
`--voice`: Whisper in CTranslate2 form (a folder with `model.bin`) and Piper
voices (an `.onnx` file with its `.onnx.json` beside it). They are stored
with the capability `transcription` or `speech`, which the server's roster of
chat and embedding models leaves out."""

from __future__ import annotations

from pathlib import Path

from inferd.model_store.errors import StoreError

# What faster-whisper reads of a CTranslate2 Whisper folder (the vocabulary is one of the two).
WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt", "vocabulary.json",
                 "preprocessor_config.json")
SPEECH_CAPABILITIES = frozenset({"transcription", "speech"})


def is_whisper_folder(path: Path) -> bool:
    return path.is_dir() and (path / "model.bin").is_file()


def is_piper_voice(path: Path) -> bool:
    return path.is_file() and path.suffix == ".onnx"


def voice_config(model: Path) -> Path:
    return model.with_name(model.name + ".json")


def speech_files(source: Path) -> dict[str, Path] | None:
    """The files to store of the speech model at `source`; None when it is none."""
    if is_piper_voice(source):
        config = voice_config(source)
        if not config.is_file():
            raise StoreError(f"{source} is a Piper voice without its config {config.name} beside it")
        return {source.name: source, config.name: config}
    if is_whisper_folder(source):
        return {name: source / name for name in WHISPER_FILES if (source / name).is_file()}
    return None


def stored_speech_model(name: str, data_dir: str | None = None) -> tuple[str, Path]:
    """(short name, the file or folder to load) of a model stored as `name`;
    ValueError saying why there is none."""
    from inferd.model_store.errors import BadModelName, ModelNotStored
    from inferd.model_store.names import ModelName
    from inferd.model_store.store import ModelStore

    try:
        wanted = ModelName.parse(name)
        return wanted.short, ModelStore.open(data_dir).resolve(wanted)
    except ModelNotStored as error:
        stored = ", ".join(error.available) or "none yet"
        raise ValueError(f"not in the model store either (stored: {stored}); `inferd import` adds a local one") from None
    except (BadModelName, StoreError) as error:
        raise ValueError(f"nor a stored model: {error}") from None
