"""OpenAI's audio routes: transcriptions, translations, speech and the voice
list. Their own record so the audio routes stay one package; errors answer
in OpenAI's envelope, the record's default."""

from __future__ import annotations

from inferd.api.openai.dialect import both
from inferd.http.dialect import Dialect, Endpoint

DIALECT = Dialect(
    name="openai-audio",
    routes="inferd.api.audio.routes",
    path_prefixes=both("/audio"),
    endpoints=(
        *(Endpoint(p, upload_limit="max_audio_size") for p in both("/audio/transcriptions")),
        *(Endpoint(p, upload_limit="max_audio_size") for p in both("/audio/translations")),
        # Speech streams sentence by sentence unless the request says "stream": false.
        *(Endpoint(p, streams_unless_false=True) for p in both("/audio/speech")),
        *(Endpoint(p, methods=("GET",)) for p in both("/audio/voices")),
    ),
)
