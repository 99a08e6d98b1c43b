"""Chat templates for models that ship none, chosen by the turn markers their vocabulary has.

Messages reach these templates with string content (text parts already
joined). Tool definitions are not rendered: each format below has no
standard place for them.
"""

from __future__ import annotations

from collections.abc import Callable

# Gemma: turns are `<start_of_turn>{user|model}` ... `<end_of_turn>`; there is no
# system role, so the system text opens the first turn.
GEMMA_TURNS = """\
{{- bos_token -}}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- set system_text = (messages[0].content or '') if has_system else '' -%}
{%- set turns = messages[1:] if has_system else messages -%}
{%- if has_system and not turns -%}
{{- '<start_of_turn>user\\n' + system_text + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- for message in turns -%}
{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' -}}
{%- if loop.first and has_system -%}
{{- system_text + '\\n\\n' -}}
{%- endif -%}
{{- (message.content or '') | trim -}}
{{- '<end_of_turn>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\\n' -}}
{%- endif -%}
"""

# ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n`. Also the plain-text format for
# models with no turn tokens at all, where the same markers are ordinary text.
CHATML = """\
{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""

# Llama 3: `<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>`;
# tool results use the role name `ipython`.
LLAMA3_HEADERS = """\
{{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + ('ipython' if message.role == 'tool' else message.role) + '<|end_header_id|>\\n\\n' -}}
{{- (message.content or '') | trim -}}
{{- '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
{%- endif -%}
"""


BUILTIN_TEMPLATES = {"gemma": GEMMA_TURNS, "chatml": CHATML, "llama3": LLAMA3_HEADERS}


def fallback_template_source(token_to_id: Callable[[str], int | None]) -> str:
    """The built-in template matching the turn markers present in a vocabulary."""
    if token_to_id("<start_of_turn>") is not None:
        return GEMMA_TURNS
    if token_to_id("<|im_start|>") is not None:
        return CHATML
    if token_to_id("<|start_header_id|>") is not None:
        return LLAMA3_HEADERS
    return CHATML
