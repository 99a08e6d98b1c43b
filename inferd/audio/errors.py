"""Audio's errors, in the HTTP hierarchy the routes answer with."""

from __future__ import annotations

from inferd.http.errors import APIError, BadRequest

INSTALL_HINT = "pip install -e '.[audio]' in a checkout, or pip install 'inferd[audio]'"


class AudioNotInstalled(APIError):
    """The audio extra is missing: the server runs, its audio routes cannot."""

    status, type = 501, "server_error"

    def __init__(self, missing: str):
        super().__init__(f"audio is not installed on this server ({missing} is missing): {INSTALL_HINT}",
                         code="audio_not_installed")


class BadAudio(BadRequest):
    """An upload that is not audio this server can decode, or is empty or too long."""

    def __init__(self, message: str):
        super().__init__(message, param="file", code="invalid_audio")
