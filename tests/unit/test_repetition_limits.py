"""Counted repetitions are measured by what they cost the lexer: escapes,
classes and quoted text are not counts, nested counts multiply."""

from __future__ import annotations

import pytest

from inferd.chat.repetition_limits import (
    MAX_REPETITION,
    lark_repetition_problem,
    regex_repetition_problem,
    schema_repetition_problem,
)


@pytest.mark.parametrize("pattern", [
    "a{2000}", r"\{5000\}", r"\p{L}{3}", r"\x{263a}{2}", "[{]{3}", "a{0,}", "a*", "(a{10}){200}",
    "[a-z]{1,2000}x{2}", r"\d{4}-\d{2}-\d{2}", "(?:ab){1000}", "(?P<n>a{5})", "(unbalanced{3", "a{,9999}",
])
def test_counts_the_lexer_can_afford_pass(pattern):
    assert regex_repetition_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "where", "in_all"), [
    ("a{2001}", "a{2001}", None),
    ("a{3,5000}", "a{3,5000}", None),
    ("x|b{3000}", "b{3000}", None),
    ("[{]{5000}", "[{]{5000}", None),
    ("(?:ab){1500}", "(?:ab){1500}", 3000),
    ("((a{50}){50}){2}", "(a{50}){50}", 2500),
])
def test_counts_beyond_the_limit_name_the_part(pattern, where, in_all):
    problem = regex_repetition_problem(pattern)
    assert problem is not None and problem.startswith("the regex repeats a part")
    assert f"at `{where}`" in problem
    assert (f"{in_all} characters in all" in problem) == (in_all is not None)
    assert f"at most {MAX_REPETITION}" in problem


def test_lark_rule_counts_and_regex_terminals_are_checked_but_strings_and_comments_are_not():
    assert lark_repetition_problem('start: "{9999}" x ~ 3..5 // y{99999}\nx: /[0-9]{1,4}/') is None
    assert "at `~ 3..9999`" in lark_repetition_problem("start: x ~ 3..9999\nx: /a/")
    assert "at `{1,3000}`" in lark_repetition_problem('start: "a"{1,3000}')
    assert "at `[ab]{3,5000}`" in lark_repetition_problem(r'start: "\"/" /[ab]{3,5000}/')


def test_schema_string_lengths_and_patterns_are_checked_anywhere_in_the_schema():
    nested = {"type": "array", "items": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 2001}}}}
    assert schema_repetition_problem(nested).startswith(
        "a JSON schema maxLength of 2001 is too long: a grammar can enforce at most 2000 characters")
    assert schema_repetition_problem({"anyOf": [{"pattern": "^z{9000}$"}]}).startswith(
        "the JSON schema's pattern repeats a part 9000 times")
    assert schema_repetition_problem({"type": "string", "minLength": 2000, "maxLength": 2000}) is None
    assert schema_repetition_problem({"type": "array", "minItems": 100000}) is None  # the parser loops over items
