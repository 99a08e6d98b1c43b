"""Which grammar, if any, a chat request's output must follow:
a required or named tool call, else response_format, else a raw regex or
GBNF grammar (the `regex` / `grammar` extension fields)."""

from __future__ import annotations

from inferd.api.openai.protocol import ChatCompletionRequest
from inferd.chat.grammar import GrammarSpec
from inferd.chat.json_schema_strict import closed_objects
from inferd.chat.tool_parsers import ToolParser
from inferd.server.errors import BadRequest


def tool_choice_mode(req: ChatCompletionRequest) -> str:
    """"none", "auto", "required" or "named"; auto when tools are given without a choice."""
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none", "auto"):
            raise BadRequest("tool_choice needs tools; send the tools the model may call", param="tool_choice")
        return "none"
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and (choice.get("function") or {}).get("name"):
        name = choice["function"]["name"]
        if name not in {(t.get("function") or {}).get("name") for t in req.tools}:
            raise BadRequest(f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
        return "named"
    raise BadRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
                     param="tool_choice")


def output_grammar(req: ChatCompletionRequest, mode: str, parser: ToolParser | None) -> GrammarSpec | None:
    if mode in ("required", "named"):
        kind, source = parser.call_grammar(req.tools, req.tool_choice)
        return GrammarSpec(kind, source)
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_object":
        return GrammarSpec("json_object")
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise BadRequest("response_format json_schema needs json_schema.schema", param="response_format")
        return GrammarSpec.json_schema(closed_objects(fmt.json_schema.schema_))
    if req.regex:
        return GrammarSpec("regex", req.regex)
    if req.grammar:
        return GrammarSpec("gbnf", req.grammar)
    return None
