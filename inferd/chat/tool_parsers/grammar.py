"""Building blocks for the Lark grammars (llguidance dialect) that force tool calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferd.chat.json_schema_strict import closed_objects

# The models' own style (`{"name": "f", "arguments": {"x": 1}}`), and nothing looser:
# free whitespace would let a forced model pad without end. `lenient` keeps a tool
# schema with a keyword llguidance lacks usable rather than failing the request.
_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": True}
_DEFINITION_KEYS = ("$defs", "definitions")


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    parameters: dict


def function_spec(tool: dict) -> FunctionSpec:
    """Accepts an OpenAI tool (`{"type": "function", "function": {...}}`) or the bare function."""
    function = tool.get("function", tool) if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool needs a function name: {tool!r}")
    parameters = function.get("parameters") or {"type": "object"}
    if not isinstance(parameters, dict):
        raise ValueError(f"the parameters of tool {name!r} must be a JSON schema object")
    return FunctionSpec(name=name, parameters=parameters)


def requested_functions(tools: list[dict], tool_choice: Any) -> tuple[list[FunctionSpec], bool]:
    """The functions a forced call may use, and whether several calls may follow."""
    specs = [function_spec(tool) for tool in tools or []]
    if tool_choice == "required":
        if not specs:
            raise ValueError('tool_choice "required" needs at least one tool')
        return specs, True
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        wanted = (tool_choice.get("function") or {}).get("name")
        for spec in specs:
            if spec.name == wanted:
                return [spec], False
        raise ValueError(f"tool_choice names {wanted!r}, which is not among the tools")
    raise ValueError(f'a call grammar needs tool_choice "required" or a named function, not {tool_choice!r}')


def json_rule(schema: dict) -> str:
    return "%json " + json.dumps({**closed_objects(schema), "x-guidance": _JSON_STYLE})


def call_object_schema(spec: FunctionSpec, arguments_key: str) -> dict:
    """`{"name": <this name>, <arguments_key>: <parameters>}`, name first.

    The parameters' definitions move to the root so their `#/$defs/...` references
    still resolve inside the wrapper.
    """
    parameters = {k: v for k, v in spec.parameters.items() if k not in _DEFINITION_KEYS}
    schema = {
        "type": "object",
        "properties": {"name": {"const": spec.name}, arguments_key: parameters},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }
    schema.update({k: spec.parameters[k] for k in _DEFINITION_KEYS if k in spec.parameters})
    return schema


def literal(text: str) -> str:
    return json.dumps(text)


def marker(text: str, token_id: Callable[[str], int | None] | None) -> str:
    """A marker as the single token the model emits for it, else as plain text."""
    found = token_id(text) if token_id is not None else None
    return f"<[{found}]>" if found is not None else literal(text)


def repeated(item: str, separator: str, many: bool) -> str:
    return f"{item} ({literal(separator)} {item})*" if many else item


def alternatives(rule: str, bodies: list[str]) -> list[str]:
    """`rule: rule_0 | rule_1 ...` plus one line per body."""
    names = [f"{rule}_{i}" for i in range(len(bodies))]
    return [f"{rule}: {' | '.join(names)}"] + [f"{name}: {body}" for name, body in zip(names, bodies)]
