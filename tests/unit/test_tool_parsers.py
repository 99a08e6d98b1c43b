"""Tool-call parsers: recorded outputs parsed whole and streamed in every split, and
the call grammars compiled by llguidance and run over tokenized examples."""

from __future__ import annotations

import json
import re

import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

from inferd.chat.tool_parsers import (
    TOOL_PARSERS, ParsedMessage, StreamDelta, ToolParser, merge_deltas, select_tool_parser)
from inferd.chat.tool_parsers.generic_json import GenericJsonToolParser
from inferd.chat.tool_parsers.hermes import HermesToolParser
from inferd.chat.tool_parsers.llama3_json import Llama3JsonToolParser
from inferd.chat.tool_parsers.mistral import MistralToolParser

CALL_ID = re.compile(r"call_[A-Za-z0-9]{24}")

# Arguments whose strings hold braces, quotes, escapes and non-ASCII text, nested.
NESTED_ARGS = (
    '{"query": "a {b} \\"c\\" ]x[ \\u00fc\\ud83d\\ude00 caf\u00e9", '
    '"filters": {"tags": ["x", {"deep": [1, 2.5, null, true, {}]}], "path": "C:\\\\tmp\\/f"}}'
)
NESTED_COMPACT = (
    '{"query":"a {b} \\"c\\" ]x[ \u00fc\U0001f600 caf\u00e9",'
    '"filters":{"tags":["x",{"deep":[1,2.5,null,true,{}]}],"path":"C:\\\\tmp/f"}}'
)

# (parser, model output, expected content, expected [(name, arguments)])
CASES = [
    # Hermes / Qwen
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     None, [("get_weather", '{"city":"Paris"}')]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
     None, [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"CET"}')]),
    ("hermes", 'Let me look that up.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
     "Let me look that up.", [("get_weather", '{"city":"Oslo"}')]),
    ("hermes", "The capital of France is Paris. 1 < 2 and <tool is not a tag.",
     "The capital of France is Paris. 1 < 2 and <tool is not a tag.", []),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>',
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>', []),
    ("hermes", '<tool_call>{"name": "search", "arguments": ' + NESTED_ARGS + '}</tool_call>',
     None, [("search", NESTED_COMPACT)]),
    # the closing tag quoted inside an argument does not end the call
    ("hermes", '<tool_call>{"name": "echo", "arguments": {"text": "</tool_call>"}}</tool_call>',
     None, [("echo", '{"text":"</tool_call>"}')]),
    # a malformed call stays content and the next one still counts
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>\n<tool_call>{"name": "b", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>', [("b", "{}")]),
    # a call cut short by a new tag: the new one still counts
    ("hermes", '<tool_call>{"name": "a", <tool_call>{"name": "b", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "a",', [("b", "{}")]),
    # the model stopped before (or partway through) the closing tag
    ("hermes", '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_ca', None, [("a", '{"x":1}')]),
    ("hermes", '<tool_call>\n{"name": "a", "argum', '<tool_call>\n{"name": "a", "argum', []),
    ("hermes", 'Done. <tool_c', "Done. <tool_c", []),
    ("hermes", '<tool_call>{"name": "ping"}</tool_call>', None, [("ping", "{}")]),
    ("hermes", '<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>',
     '<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>', []),
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x": NaN}}</tool_call>',
     '<tool_call>{"name": "a", "arguments": {"x": NaN}}</tool_call>', []),
    # Llama 3
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [("get_weather", '{"city":"Paris"}')]),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
     None, [("get_weather", '{"city":"Paris"}')]),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {"zone": "CET"}}',
     None, [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"CET"}')]),
    ("llama3_json", 'Checking now.<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}',
     "Checking now.", [("get_weather", '{"city":"Rome"}')]),
    ("llama3_json", "Paris is the capital of France.", "Paris is the capital of France.", []),
    ("llama3_json", 'Use {"name": "x"} in your config.', 'Use {"name": "x"} in your config.', []),
    ("llama3_json", '{"answer": 42}', '{"answer": 42}', []),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris",}}',
     '{"name": "get_weather", "parameters": {"city": "Paris",}}', []),
    ("llama3_json", '{"name": "search", "parameters": ' + NESTED_ARGS + '}', None, [("search", NESTED_COMPACT)]),
    ("llama3_json", '  {"name": "a", "arguments": {}};  ', None, [("a", "{}")]),
    ("llama3_json", '{"name": "a", "parameters": {}}; oops', "; oops", [("a", "{}")]),
    ("llama3_json", '<|python_tag|>; {"name": "a", "parameters": {}}', '<|python_tag|>; {"name": "a", "parameters": {}}', []),
    ("llama3_json", '{"name": "a", "parameters": {"x": 1}', '{"name": "a", "parameters": {"x": 1}', []),
    # Mistral, list form
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]', None, [("get_weather", '{"city":"Paris"}')]),
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}, '
                '{"name": "get_time", "arguments": {"zone": "CET"}}]',
     None, [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"CET"}')]),
    ("mistral", 'I will check.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lima"}}]',
     "I will check.", [("get_weather", '{"city":"Lima"}')]),
    ("mistral", "No tools needed [here].", "No tools needed [here].", []),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}]',
     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}]', []),
    ("mistral", '[TOOL_CALLS][{"arguments": {"city": "Paris"}}]', '[TOOL_CALLS][{"arguments": {"city": "Paris"}}]', []),
    ("mistral", '[TOOL_CALLS][{"name": "search", "arguments": ' + NESTED_ARGS + '}]', None, [("search", NESTED_COMPACT)]),
    # Mistral, [ARGS] form
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', None, [("get_weather", '{"city":"Paris"}')]),
    ("mistral", 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}',
     "Sure.", [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"CET"}')]),
    ("mistral", '[TOOL_CALLS]search[ARGS]' + NESTED_ARGS, None, [("search", NESTED_COMPACT)]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": Paris}', '[TOOL_CALLS]get_weather[ARGS]{"city": Paris}', []),
    ("mistral", '[TOOL_CALLS]bad name[TOOL_CALLS]ok[ARGS]{}', "[TOOL_CALLS]bad name", [("ok", "{}")]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa', '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa', []),
    # generic JSON envelope
    ("generic_json", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}',
     None, [("get_weather", '{"city":"Paris"}')]),
    ("generic_json", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                     '{"name": "get_time", "arguments": {"zone": "CET"}}]}',
     None, [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"CET"}')]),
    ("generic_json", '{"content": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}',
     "Let me check.", [("get_weather", '{"city":"Oslo"}')]),
    ("generic_json", '{"content": "Paris is the capital: \\"Ville\\" \\u00e9\\ud83d\\ude00\\n\\tend"}',
     'Paris is the capital: "Ville" \u00e9\U0001f600\n\tend', []),
    ("generic_json", "Paris is the capital of France.", "Paris is the capital of France.", []),
    ("generic_json", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": }}]}',
     '{"tool_calls": [{"name": "get_weather", "arguments": {"city": }}]}', []),
    ("generic_json", '{"tool_calls": [{"name": "search", "arguments": ' + NESTED_ARGS + '}]}', None, [("search", NESTED_COMPACT)]),
    ("generic_json", '{"answer": 42}', '{"answer": 42}', []),
    ("generic_json", '{"content": "Hello wor', "Hello wor", []),
    ("generic_json", '{"content": "', None, []),
    ("generic_json", '{"content": "\\q"}', '\\q"}', []),
    ("generic_json", '{"conte', '{"conte', []),
    ("generic_json", '{"content": "bad \\q escape"}', 'bad \\q escape"}', []),
    ("generic_json", '{"content": "lone \\ud83d surrogate"}', 'lone \\ud83d surrogate"}', []),
    ("generic_json", '{"content": null, "tool_calls": [{"name": "a", "arguments": {}}]}', None, [("a", "{}")]),
    ("generic_json", '{"tool_calls": []}', None, []),
    ("generic_json", '{"content": "hi"} trailing', "hi trailing", []),
    ("generic_json", '{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "argu',
     ', {"name": "b", "argu', [("a", "{}")]),
]

CASE_IDS = [f"{name}-{i}" for i, (name, *_) in enumerate(CASES)]


def shape(message: ParsedMessage) -> tuple[str | None, list[tuple[str, str]]]:
    return message.content, [(call.name, call.arguments) for call in message.tool_calls]


def stream(parser: ToolParser, pieces: list[str]) -> list[StreamDelta]:
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def split_at(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize(("parser_name", "text", "content", "calls"), CASES, ids=CASE_IDS)
def test_parse_recorded_output(parser_name, text, content, calls):
    message = TOOL_PARSERS[parser_name]().parse(text)
    assert shape(message) == (content, calls)
    assert all(CALL_ID.fullmatch(call.id) for call in message.tool_calls)
    assert len({call.id for call in message.tool_calls}) == len(calls)
    for call in message.tool_calls:
        assert json.loads(call.arguments) is not None


@pytest.mark.parametrize(("parser_name", "text", "content", "calls"), CASES, ids=CASE_IDS)
def test_streamed_in_two_pieces_at_every_boundary(parser_name, text, content, calls):
    for cut in range(len(text) + 1):
        deltas = stream(TOOL_PARSERS[parser_name](), [text[:cut], text[cut:]])
        assert shape(merge_deltas(deltas)) == (content, calls), f"split at {cut}: {text[:cut]!r} | {text[cut:]!r}"


@pytest.mark.parametrize(("parser_name", "text", "content", "calls"), CASES, ids=CASE_IDS)
def test_streamed_one_character_at_a_time(parser_name, text, content, calls):
    deltas = stream(TOOL_PARSERS[parser_name](), list(text))
    assert shape(merge_deltas(deltas)) == (content, calls)
    # OpenAI's shape: the first delta of a call has its index, id and whole name.
    firsts = [part for delta in deltas for part in delta.tool_calls if part.id is not None]
    assert [part.index for part in firsts] == list(range(len(calls)))
    assert [part.name for part in firsts] == [name for name, _ in calls]
    assert all(CALL_ID.fullmatch(part.id) for part in firsts)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize(("parser_name", "text", "content", "calls"), CASES, ids=CASE_IDS)
def test_streamed_in_random_chunks(parser_name, text, content, calls, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    deltas = stream(TOOL_PARSERS[parser_name](), split_at(text, cuts))
    assert shape(merge_deltas(deltas)) == (content, calls)


# Pieces that stress the parsers: markers and their fragments, JSON punctuation, escapes.
FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<tool", "_call>", "[TOOL_CALLS]", "[ARGS]", "[TOOL", "<|python_tag|>", "<|py",
    "{", "}", "[", "]", '"', "\\", ":", ",", ";", " ", "\n", "a", "é", "\\u00e9", "\\ud83d", "\\ude00", "null", "1",
    '"name"', '"arguments"', '"parameters"', '"content"', '"tool_calls"', '"f"', "{}", "NaN",
]


@settings(max_examples=150, deadline=None)
@given(parser_name=st.sampled_from(sorted(TOOL_PARSERS)), pieces=st.lists(st.sampled_from(FRAGMENTS), max_size=40),
       cuts=st.lists(st.integers(0, 400), max_size=10))
def test_any_text_streams_to_what_parse_finds(parser_name, pieces, cuts):
    text = "".join(pieces)
    whole = TOOL_PARSERS[parser_name]().parse(text)
    streamed = merge_deltas(stream(TOOL_PARSERS[parser_name](), split_at(text, [c for c in cuts if c <= len(text)])))
    assert shape(streamed) == shape(whole)


@settings(max_examples=60, deadline=None)
@given(parser_name=st.sampled_from(sorted(TOOL_PARSERS)),
       text=st.text(alphabet=st.characters(blacklist_characters="{<[", blacklist_categories=("Cs",))))
def test_text_without_markers_is_all_content(parser_name, text):
    message = TOOL_PARSERS[parser_name]().parse(text)
    assert shape(message) == (text.strip() or None, [])


@pytest.mark.parametrize(("parser", "pieces", "expected"), [
    (HermesToolParser, ["Let me check.", " <tool"], ["Let me check.", ""]),
    (HermesToolParser, ["Hi <tool", "box>"], ["Hi", " <toolbox>"]),
    (MistralToolParser, ["Sure [TOOL", "_CALLS]x[ARGS]{}"], ["Sure", ""]),
    (Llama3JsonToolParser, ["Hello", " there"], ["Hello", " there"]),
    (Llama3JsonToolParser, ["<|py", "thon is a snake"], ["", "<|python is a snake"]),
    (GenericJsonToolParser, ['{"content": "Hel', 'lo\\u00', 'e9!"}'], ["Hel", "lo", "é!"]),
])
def test_content_streams_as_soon_as_it_cannot_be_a_marker(parser, pieces, expected):
    parser = parser()
    assert [parser.feed(piece).content for piece in pieces] == expected


def test_a_call_arrives_in_the_delta_that_completes_it():
    parser = HermesToolParser()
    before = parser.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call')
    done = parser.feed(">\n")
    assert before == StreamDelta()
    assert done.content == "" and len(done.tool_calls) == 1
    call = done.tool_calls[0]
    assert (call.index, call.name, call.arguments) == (0, "get_weather", '{"city":"Paris"}')
    assert parser.finish() == StreamDelta()


def test_parse_leaves_the_stream_alone():
    parser = HermesToolParser()
    parser.feed("Hi <tool_")
    assert shape(parser.parse("<tool_call>{\"name\": \"x\"}</tool_call>")) == (None, [("x", "{}")])
    parser.feed('call>{"name": "y"}</tool_call>')
    assert shape(merge_deltas([parser.finish()])) == (None, [])
    assert shape(parser.parse("plain")) == ("plain", [])


def test_stream_ids_are_fresh_per_call():
    parser = MistralToolParser()
    deltas = stream(parser, ['[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "a", "arguments": {}}]'])
    ids = [part.id for delta in deltas for part in delta.tool_calls]
    assert len(ids) == 2 and ids[0] != ids[1]


# -- selection --------------------------------------------------------------

def vocab(*tokens: str):
    return lambda token: token in tokens


def test_registry_names():
    assert sorted(TOOL_PARSERS) == ["generic_json", "hermes", "llama3_json", "mistral"]
    assert all(TOOL_PARSERS[name].name == name for name in TOOL_PARSERS)


@pytest.mark.parametrize(("name", "expected"), [
    ("hermes", HermesToolParser), ("llama3_json", Llama3JsonToolParser),
    ("mistral", MistralToolParser), ("generic_json", GenericJsonToolParser),
])
def test_an_explicit_name_wins_over_detection(name, expected):
    assert select_tool_parser(name, vocab("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"), "llama") is expected


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown tool parser 'qwen'; valid names: generic_json, hermes, llama3_json, mistral"):
        select_tool_parser("qwen", vocab(), "qwen2")


@pytest.mark.parametrize(("tokens", "model_type", "expected"), [
    (("<tool_call>", "</tool_call>"), "qwen2", HermesToolParser),
    (("<tool_call>", "<|python_tag|>"), "llama", HermesToolParser),  # a Hermes fine-tune of Llama 3.1
    (("[TOOL_CALLS]", "[ARGS]"), "mistral", MistralToolParser),
    (("<|python_tag|>", "<|eom_id|>"), "llama", Llama3JsonToolParser),
    (("<start_of_turn>",), "gemma3", GenericJsonToolParser),
    ((), "llama", GenericJsonToolParser),
])
def test_detection_from_the_vocabulary(tokens, model_type, expected):
    assert select_tool_parser(None, vocab(*tokens), model_type) is expected


# -- grammars ---------------------------------------------------------------

MARKERS = ["<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]"]


def byte_tokenizer(markers: list[str]) -> Tokenizer:
    """Byte-level BPE without merges: every text is spelled byte by byte, and each marker
    given is one added token, as in the models that use it."""
    vocab_ = {"<eos>": 0, **{char: i + 1 for i, char in enumerate(sorted(ByteLevel.alphabet()))}}
    tokenizer = Tokenizer(models.BPE(vocab=vocab_, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<eos>"])
    tokenizer.add_tokens(markers)
    return tokenizer


class Vocabulary:
    def __init__(self, markers: list[str]):
        self.tokenizer = byte_tokenizer(markers)
        self.llg = llguidance.LLTokenizer(self.tokenizer.to_str(), eos_token=0)

    def accepts(self, grammar: str, text: str) -> bool:
        matcher = llguidance.LLMatcher(self.llg, llguidance.grammar_from("lark", grammar), log_level=0)
        return matcher.consume_tokens(self.tokenizer.encode(text).ids) and matcher.is_accepting()


@pytest.fixture(scope="module")
def with_markers() -> Vocabulary:
    return Vocabulary(MARKERS)


@pytest.fixture(scope="module")
def without_markers() -> Vocabulary:
    return Vocabulary([])


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"$ref": "#/$defs/filters"}},
            "required": ["query"],
            "$defs": {"filters": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}}}}},
    {"type": "function", "function": {"name": "ping"}},
]
WEATHER = ("get_weather", {"city": "Z\u00fcrich", "unit": "celsius"})
SEARCH = ("search", {"query": 'a {b} "c"', "filters": {"tags": ["x", "y"]}})
PING = ("ping", {})


def hermes_text(calls):
    return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}\n</tool_call>" for n, a in calls)


def llama3_text(calls):
    return "; ".join(json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in calls)


def mistral_list_text(calls):
    return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)


def mistral_args_text(calls):
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a, ensure_ascii=False)}" for n, a in calls)


def generic_text(calls):
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, ensure_ascii=False)


# (parser, writes the model's output for some calls, vocabulary has the markers)
FORMATS = [
    (HermesToolParser, hermes_text, True),
    (HermesToolParser, hermes_text, False),
    (Llama3JsonToolParser, llama3_text, True),
    (MistralToolParser, mistral_args_text, True),
    (MistralToolParser, mistral_list_text, False),
    (GenericJsonToolParser, generic_text, False),
]
FORMAT_IDS = [f"{p.name}-{w.__name__}-{'tokens' if m else 'text'}" for p, w, m in FORMATS]


def make_parser(parser, vocabulary: Vocabulary, markers: bool) -> ToolParser:
    return parser(token_id=vocabulary.tokenizer.token_to_id) if markers else parser()


@pytest.mark.parametrize(("parser", "write", "markers"), FORMATS, ids=FORMAT_IDS)
def test_required_grammar_compiles_and_takes_one_or_more_calls(parser, write, markers, with_markers, without_markers):
    vocabulary = with_markers if markers else without_markers
    kind, grammar = make_parser(parser, vocabulary, markers).call_grammar(TOOLS, "required")
    assert kind == "lark"
    assert llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", grammar), vocabulary.llg) == ""
    for calls in ([WEATHER], [SEARCH, WEATHER], [PING, SEARCH, WEATHER]):
        assert vocabulary.accepts(grammar, write(calls)), write(calls)
    # Parsing what the grammar lets through gives back the calls that were written.
    text = write([SEARCH, PING])
    message = make_parser(parser, vocabulary, markers).parse(text)
    assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == [SEARCH, PING]
    assert message.content is None


@pytest.mark.parametrize(("parser", "write", "markers"), FORMATS, ids=FORMAT_IDS)
def test_required_grammar_rejects_what_breaks_the_format(parser, write, markers, with_markers, without_markers):
    vocabulary = with_markers if markers else without_markers
    _, grammar = make_parser(parser, vocabulary, markers).call_grammar(TOOLS, "required")
    assert not vocabulary.accepts(grammar, "")
    assert not vocabulary.accepts(grammar, "The weather is fine.")
    assert not vocabulary.accepts(grammar, write([("get_time", {"zone": "CET"})]))  # not a tool
    assert not vocabulary.accepts(grammar, write([("get_weather", {"unit": "celsius"})]))  # city is required
    assert not vocabulary.accepts(grammar, write([("get_weather", {"city": "Paris", "unit": "kelvin"})]))
    assert not vocabulary.accepts(grammar, write([("search", {"query": "q", "filters": {"tags": [1]}})]))
    # The models' own spacing, exactly: neither tighter nor padded.
    assert not vocabulary.accepts(grammar, write([WEATHER]).replace('"city": ', '"city":'))
    assert not vocabulary.accepts(grammar, write([WEATHER]).replace('"city": ', '"city":    '))


@pytest.mark.parametrize(("parser", "write", "markers"), FORMATS, ids=FORMAT_IDS)
def test_named_grammar_takes_exactly_one_call_of_that_tool(parser, write, markers, with_markers, without_markers):
    vocabulary = with_markers if markers else without_markers
    choice = {"type": "function", "function": {"name": "search"}}
    _, grammar = make_parser(parser, vocabulary, markers).call_grammar(TOOLS, choice)
    assert llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", grammar), vocabulary.llg) == ""
    assert vocabulary.accepts(grammar, write([SEARCH]))
    assert not vocabulary.accepts(grammar, write([WEATHER]))
    assert not vocabulary.accepts(grammar, write([SEARCH, SEARCH]))


def test_marker_tokens_are_required_when_the_vocabulary_has_them(with_markers):
    _, grammar = HermesToolParser(token_id=with_markers.tokenizer.token_to_id).call_grammar(TOOLS, "required")
    spelled_out = with_markers.tokenizer.encode("<").ids + with_markers.tokenizer.encode("tool_call>").ids
    matcher = llguidance.LLMatcher(with_markers.llg, llguidance.grammar_from("lark", grammar), log_level=0)
    assert not matcher.consume_tokens(spelled_out)
    assert "<[" in grammar and '"<tool_call>"' not in grammar


def test_mistral_uses_the_args_form_only_when_args_is_a_token(with_markers):
    only_tool_calls = Vocabulary(["[TOOL_CALLS]"])
    _, grammar = MistralToolParser(token_id=only_tool_calls.tokenizer.token_to_id).call_grammar(TOOLS, "required")
    assert only_tool_calls.accepts(grammar, mistral_list_text([WEATHER]))
    assert not only_tool_calls.accepts(grammar, mistral_args_text([WEATHER]))
    _, grammar = MistralToolParser(token_id=with_markers.tokenizer.token_to_id).call_grammar(TOOLS, "required")
    assert with_markers.accepts(grammar, mistral_args_text([WEATHER]))
    assert not with_markers.accepts(grammar, mistral_list_text([WEATHER]))


@pytest.mark.parametrize("parser", list(TOOL_PARSERS.values()))
@pytest.mark.parametrize(("tools", "choice", "message"), [
    (TOOLS, "auto", "needs tool_choice"),
    (TOOLS, "none", "needs tool_choice"),
    (TOOLS, {"type": "function", "function": {"name": "get_time"}}, "'get_time', which is not among the tools"),
    ([], "required", "at least one tool"),
    ([{"type": "function", "function": {"description": "no name"}}], "required", "needs a function name"),
])
def test_grammar_refuses_what_it_cannot_force(parser, tools, choice, message):
    with pytest.raises(ValueError, match=message):
        parser().call_grammar(tools, choice)
