"""Speech: transcription with faster-whisper and synthesis with Piper.

Knows no HTTP routes and no engine: the audio routes (`inferd.api.audio`)
call `service.AudioService`, which loads its models on first use and runs
every job on its own bounded worker threads (`executor.py`), so audio never
blocks the event loop or the text engine. The libraries come with the
`audio` extra; without it each call raises `AudioNotInstalled`.
"""
