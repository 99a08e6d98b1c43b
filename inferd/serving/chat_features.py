"""Per-model chat machinery chosen once at load: the grammar compiler, the
tool-call parser for the model's family, and its reasoning markers."""

from __future__ import annotations

from inferd.chat.grammar import GrammarCompiler
from inferd.chat.reasoning import think_markers
from inferd.chat.tool_parsers import select_tool_parser
from inferd.models.loader import LoadedModel
from inferd.serving.state import ServerState


def attach_chat_features(state: ServerState, loaded: LoadedModel) -> None:
    tokenizer = loaded.tokenizer
    keep_markers_visible(tokenizer)
    state.grammar = GrammarCompiler(tokenizer, loaded.config.vocab_size)
    state.tool_parser = select_tool_parser(
        state.config.tool_call_parser, lambda piece: tokenizer.token_to_id(piece) is not None, loaded.config.model_type
    )
    if state.config.reasoning_format not in ("deepseek", "none"):
        raise ValueError(f"--reasoning-format must be deepseek or none, got {state.config.reasoning_format!r}")
    state.think_markers = think_markers(tokenizer) if state.config.reasoning_format == "deepseek" else None


# Markers the reasoning and tool-call parsers read from the text. Some
# vocabularies flag them as special tokens, which decoding would drop.
STRUCTURAL_MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>")


def keep_markers_visible(tokenizer) -> None:
    ids = {tokenizer.token_to_id(m) for m in STRUCTURAL_MARKERS} - {None}
    tokenizer.special_token_ids = frozenset(tokenizer.special_token_ids - ids)
