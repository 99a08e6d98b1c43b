"""Engine logprobs in the two OpenAI shapes (chat and legacy completions)."""

from __future__ import annotations

from inferd.api.openai.protocol import ChoiceLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob
from inferd.engine.outputs import TokenLogprobs
from inferd.models.tokenizer import Tokenizer


def _piece(tokenizer: Tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(tokenizer: Tokenizer, entries: list[TokenLogprobs], top: int) -> ChoiceLogprobs:
    content = []
    for e in entries:
        piece = _piece(tokenizer, e.token_id)
        alternatives = [
            TopLogprob(token=_piece(tokenizer, t), logprob=lp, bytes=list(_piece(tokenizer, t).encode()))
            for t, lp in e.top[:top]
        ]
        content.append(TokenLogprob(token=piece, logprob=e.logprob, bytes=list(piece.encode()), top_logprobs=alternatives))
    return ChoiceLogprobs(content=content)


def completion_logprobs(tokenizer: Tokenizer, entries: list[TokenLogprobs], offset: int) -> CompletionLogprobs:
    out = CompletionLogprobs()
    for e in entries:
        piece = _piece(tokenizer, e.token_id)
        out.tokens.append(piece)
        out.token_logprobs.append(e.logprob)
        out.top_logprobs.append({_piece(tokenizer, t): lp for t, lp in e.top} or None)
        out.text_offset.append(offset)
        offset += len(piece)
    return out
