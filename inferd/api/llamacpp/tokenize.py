"""POST /tokenize and POST /detokenize."""

from __future__ import annotations

from inferd.api.llamacpp.pieces import token_piece
from inferd.api.llamacpp.protocol import DetokenizeRequest, TokenizeRequest
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState


def tokenize(state: ServerState, req: TokenizeRequest) -> dict:
    tokenizer = state.require_engine().tokenizer
    if not req.parse_special:
        # The tokenizer always reads control-token text (e.g. "<bos>") as the control token.
        raise BadRequest("parse_special false is not supported: special-token text is always parsed; "
                         "drop parse_special", param="parse_special")
    ids = tokenizer.encode(req.content, add_special_tokens=req.add_special)
    if not req.with_pieces:
        return {"tokens": ids}
    return {"tokens": [{"id": token_id, "piece": token_piece(tokenizer, token_id)} for token_id in ids]}


def detokenize(state: ServerState, req: DetokenizeRequest) -> dict:
    tokenizer = state.require_engine().tokenizer
    for i, token_id in enumerate(req.tokens):
        if not 0 <= token_id < tokenizer.vocab_size:
            raise BadRequest(f"tokens[{i}] = {token_id} is outside the vocabulary [0, {tokenizer.vocab_size})",
                             param="tokens")
    return {"content": tokenizer.decode(req.tokens, skip_special_tokens=False)}
