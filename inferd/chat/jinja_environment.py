"""The sandboxed Jinja environment chat templates run in.

Model chat templates are written against the helpers Hugging Face
transformers provides, so the same names behave the same way here:
`raise_exception`, `strftime_now`, a `tojson` filter that keeps non-ASCII text
as is, loop controls (`break`/`continue`), the `{% generation %}` block, and
trim_blocks + lstrip_blocks whitespace handling.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(ValueError):
    """A chat template could not be compiled or rendered, or refused the conversation."""


def raise_exception(message: str) -> NoReturn:
    raise TemplateError(message)


def strftime_now(date_format: str) -> str:
    return datetime.now().strftime(date_format)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML, which would change the prompt text.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks the assistant's part of a template
    for training masks; for inference it renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def chat_template_environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        extensions=[loopcontrols, GenerationBlock],
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment
