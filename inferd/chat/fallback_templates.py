"""Built-in chat templates: for models that ship none, and by name (--chat-template).

A model that ships no template is almost always a base model: its turn
markers were never trained, so it answers a plain "User: / Assistant:"
transcript far better than its family's turn format. That transcript is the
default; the turn formats stay available by name.

Messages reach these templates with string content (text parts already
joined). Tool definitions are not rendered: each format below has no
standard place for them.
"""

from __future__ import annotations

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


# A plain transcript; the engine stops at the next "User:" line. Without a
# system message, one line framing the conversation makes base models answer.
TRANSCRIPT_PREAMBLE = "A conversation between a curious user and a helpful, knowledgeable assistant."
TRANSCRIPT = """\
{{- bos_token -}}
{%- if not messages or messages[0].role not in ('system', 'developer') -%}
{{- '""" + TRANSCRIPT_PREAMBLE + """\\n\\n' -}}
{%- endif -%}
{%- if tools -%}
{{- 'The assistant can call tools. To call them it answers with only this JSON: '
    '{"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}. Otherwise it answers in words.\\nTools:\\n' -}}
{%- for tool in tools -%}
{%- set f = tool.function if tool.function is defined else tool -%}
{{- '- ' + f.name + ': ' + (f.description or '') + ' Arguments: ' + (f.parameters or {}) | tojson + '\\n' -}}
{%- endfor -%}
{{- '\\n' -}}
{%- endif -%}
{%- set speakers = {'user': 'User', 'assistant': 'Assistant', 'tool': 'Tool'} -%}
{%- for message in messages -%}
{%- if message.role in ('system', 'developer') -%}
{{- (message.content or '') | trim + '\\n\\n' -}}
{%- elif message.role == 'assistant' and message.tool_calls -%}
{{- 'Assistant: {"tool_calls": [' -}}
{%- for call in message.tool_calls -%}
{{- ('' if loop.first else ', ') + '{"name": ' + call.function.name | tojson + ', "arguments": '
    + call.function.arguments | tojson + '}' -}}
{%- endfor -%}
{{- ']}\\n' -}}
{%- else -%}
{{- speakers[message.role] + ': ' + (message.content or '') | trim + '\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- 'Assistant:' -}}
{%- endif -%}
"""
TRANSCRIPT_STOP = ("\nUser:",)

BUILTIN_TEMPLATES = {"transcript": TRANSCRIPT, "gemma": GEMMA_TURNS, "chatml": CHATML, "llama3": LLAMA3_HEADERS}
BUILTIN_STOPS = {"transcript": TRANSCRIPT_STOP}
