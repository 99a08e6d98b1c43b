"""Which grammar, if any, a chat request's output must follow:
a required or named tool call, else response_format, else a raw regex or
GBNF grammar (the `regex` / `grammar` extension fields)."""

from __future__ import annotations

from inferd.chat.grammar import GrammarSpec
from inferd.chat.json_schema_strict import closed_objects
from inferd.chat.tool_parsers import ToolParser
from inferd.http.errors import BadRequest
from inferd.serving.chat_request import ChatCompletionRequest


def output_grammar(req: ChatCompletionRequest, mode: str, parser: ToolParser | None) -> GrammarSpec | None:
    if mode in ("required", "named"):
        kind, source = parser.call_grammar(req.tools, req.tool_choice)
        return GrammarSpec(kind, source)
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_object":
        if fmt.schema_ is not None:
            return GrammarSpec.json_schema(closed_objects(fmt.schema_))
        return GrammarSpec("json_object")
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise BadRequest("response_format json_schema needs json_schema.schema", param="response_format")
        return GrammarSpec.json_schema(closed_objects(fmt.json_schema.schema_))
    if req.json_schema is not None and (fmt is None or fmt.type == "text"):
        return GrammarSpec.json_schema(closed_objects(req.json_schema))
    if req.regex:
        return GrammarSpec("regex", req.regex)
    if req.grammar:
        return GrammarSpec("gbnf", req.grammar)
    return None
