"""POST /apply-template: the prompt a chat request would be sent as, without generating."""

from __future__ import annotations

from inferd.api.llamacpp.valid_text import find_unpaired_surrogate
from inferd.serving.chat_prompt import render_chat_prompt
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState


def apply_template(state: ServerState, req: ChatCompletionRequest) -> dict:
    state.require_engine()  # the template is set with the engine
    prompt = render_chat_prompt(state.template, req)
    if find_unpaired_surrogate(prompt):
        raise BadRequest("messages hold an unpaired UTF-16 surrogate; send valid Unicode text", param="messages")
    return {"prompt": prompt}
