"""Rendering a conversation into a prompt with a model's chat template."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jinja2

from pathlib import Path

from inferd.chat.fallback_templates import BUILTIN_STOPS, BUILTIN_TEMPLATES
from inferd.chat.jinja_environment import TemplateError, chat_template_environment
from inferd.chat.message_content import template_reads_content_parts, with_text_content

if TYPE_CHECKING:
    from inferd.models.tokenizer import Tokenizer

__all__ = ["ChatTemplate", "TemplateError", "chat_template_for"]


class ChatTemplate:
    """A Jinja chat template, compiled once, rendered per request."""

    def __init__(self, source: str, bos_token: str | None, eos_token: str | None, stop: tuple[str, ...] = ()):
        self.source = source
        self.defaults: dict[str, Any] = {}  # server-wide variables (--chat-template-kwargs), under each request's
        self._reads_enable_thinking = "enable_thinking" in source
        self.stop = stop  # strings that end an assistant turn in this format (beyond EOS tokens)
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._reads_content_parts = template_reads_content_parts(source)
        try:
            self._template = chat_template_environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateError(
                f"the chat template does not compile: {error.message} (template line {error.lineno})"
            ) from error

    def render(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text. `template_kwargs` become template variables (enable_thinking, documents, ...)."""
        variables: dict[str, Any] = {}
        # An absent token stays undefined (renders as ""), as templates expect, rather than "None".
        if self.bos_token is not None:
            variables["bos_token"] = self.bos_token
        if self.eos_token is not None:
            variables["eos_token"] = self.eos_token
        if self._reads_enable_thinking:
            variables["enable_thinking"] = True  # a template that can think does, unless told not to
        variables.update(self.defaults)
        variables.update(template_kwargs)
        variables.update(
            messages=messages if self._reads_content_parts else with_text_content(messages),
            tools=tools,
            add_generation_prompt=add_generation_prompt,
        )
        try:
            return self._template.render(variables)
        except TemplateError:
            raise
        except Exception as error:  # any failure inside template code is the template's
            raise TemplateError(f"the chat template failed to render: {type(error).__name__}: {error}") from error


def chat_template_for(tokenizer: Tokenizer, override: str | None = None) -> ChatTemplate:
    """`override` (a built-in name or a Jinja file), else the model's own
    template, else the plain transcript (see fallback_templates)."""
    name = override
    if override:
        if override in BUILTIN_TEMPLATES:
            source = BUILTIN_TEMPLATES[override]
        elif _is_template_text(override):  # llama-server's --chat-template takes the template itself
            source = override
        elif Path(override).is_file():
            source = Path(override).read_text()
        elif override in LLAMA_CPP_BUILTINS:
            raise TemplateError(
                f"--chat-template {override!r} is one of llama-server's built-in templates, which inferd does not "
                f"bundle; give the model's template as a file (--chat-template-file) or as text, or use one of "
                f"inferd's: {', '.join(BUILTIN_TEMPLATES)}"
            )
        else:
            raise TemplateError(
                f"--chat-template {override!r} is neither a built-in ({', '.join(BUILTIN_TEMPLATES)}), "
                "a file, nor Jinja template text"
            )
    elif tokenizer.chat_template:
        source = tokenizer.chat_template
    else:
        name, source = "transcript", BUILTIN_TEMPLATES["transcript"]
    return ChatTemplate(source, tokenizer.bos_token, tokenizer.eos_token, stop=BUILTIN_STOPS.get(name, ()))


# llama-server's built-in template names beyond those inferd bundles under the same name,
# so a command line naming one is told what to do instead of "not a file".
LLAMA_CPP_BUILTINS = frozenset((
    "bailing bailing-think bailing2 chatglm3 chatglm4 command-r deepseek deepseek2 deepseek3 exaone3 exaone4 "
    "falcon3 gigachat glmedge gpt-oss granite hunyuan-dense hunyuan-moe kimi-k2 llama2 llama2-sys llama2-sys-bos "
    "llama2-sys-strip llama4 megrez minicpm mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 mistral-v7-tekken "
    "monarch openchat orion phi3 phi4 rwkv-world seed_oss smolvlm vicuna vicuna-orca yandex zephyr"
).split())


def _is_template_text(value: str) -> bool:
    return "{{" in value or "{%" in value
