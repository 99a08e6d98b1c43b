"""Counted repetitions a grammar may ask for, checked before it compiles.

llguidance builds a lexer state for each character along a counted repetition
(`a{1000}`, a JSON string's `maxLength`), and the parser an item for each copy
of a repeated rule. A count in the millions compiles in microseconds and then
runs out of states or items part-way through a request. Like llama.cpp's
grammar parser, a count above MAX_REPETITION is refused up front; nested
counts multiply, since `(a{100}){100}` costs what `a{10000}` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["MAX_REPETITION", "lark_repetition_problem", "regex_repetition_problem", "schema_repetition_problem"]

MAX_REPETITION = 2000

_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
_LARK_RANGE = re.compile(r"~\s*(\d+)(?:\s*\.\.\s*(\d+))?")


def regex_repetition_problem(pattern: str) -> str | None:
    """Why `pattern` repeats too much, or None when it does not."""
    try:
        _RegexSpans(pattern).whole()
    except _TooMany as error:
        return f"the regex {error}"
    return None


def lark_repetition_problem(lark: str) -> str | None:
    """The same for a Lark grammar (GBNF arrives converted to Lark): its rule
    repetitions (`x{n,m}`, `x ~ n..m`) and every /regex/ terminal."""
    try:
        for kind, text in _lark_pieces(lark):
            if kind == "regex":
                _RegexSpans(text).whole()
            else:
                for count, written in _rule_counts(text):
                    _check(count, count, written)
    except _TooMany as error:
        return f"the grammar {error}"
    return None


def schema_repetition_problem(schema: object) -> str | None:
    """The same for a JSON schema: string lengths and `pattern`s, anywhere in it."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for keyword in ("minLength", "maxLength"):
                length = node.get(keyword)
                if isinstance(length, int) and not isinstance(length, bool) and length > MAX_REPETITION:
                    return (f"a JSON schema {keyword} of {length} is too long: a grammar can enforce at most "
                            f"{MAX_REPETITION} characters; lower it, or leave it out and bound the output with "
                            "max_tokens")
            if isinstance(node.get("pattern"), str):
                problem = regex_repetition_problem(node["pattern"])
                if problem is not None:
                    return f"the JSON schema's pattern {problem.removeprefix('the regex ')}"
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return None


class _TooMany(Exception):
    pass


def _check(count: int, span: int, written: str) -> None:
    if span > MAX_REPETITION:
        in_all = "" if span == count else f", {span} characters in all"
        raise _TooMany(f"repeats a part {count} times at `{written}`{in_all}; a grammar can enforce at most "
                       f"{MAX_REPETITION}: lower the count, or use * or + and bound the output with max_tokens")


class _RegexSpans:
    """Walks a regex and multiplies each counted repetition by the length of
    what it repeats. Syntax errors are left for the compiler to report."""

    def __init__(self, pattern: str):
        self.text = pattern
        self.at = 0

    def whole(self) -> None:
        while self.at < len(self.text):
            self.alternatives()
            self.at += 1  # an unbalanced ")": the compiler will say so

    def alternatives(self) -> int:
        longest = self.sequence()
        while self.peek() == "|":
            self.at += 1
            longest = max(longest, self.sequence())
        return longest

    def sequence(self) -> int:
        total = 0
        while self.at < len(self.text) and self.peek() not in "|)":
            start = self.at
            total += self.repeated(self.atom(), start)
        return total

    def atom(self) -> int:
        char = self.peek()
        self.at += 1
        if char == "(":
            if self.peek() == "?":  # (?:...), (?P<name>...), (?i) and friends: skip the flags
                while self.at < len(self.text) and self.text[self.at] not in ":)":
                    self.at += 1
                if self.peek() == ":":
                    self.at += 1
            inner = self.alternatives()
            if self.peek() == ")":
                self.at += 1
            return inner
        if char == "[":
            self.skip_class()
        elif char == "\\":
            self.skip_escape()
        return 1

    def repeated(self, span: int, start: int) -> int:
        while True:
            char = self.peek()
            if char in ("*", "+", "?"):
                self.at += 1  # an unbounded loop costs what one pass through it does
                continue
            count = _COUNT.match(self.text, self.at) if char == "{" else None
            if count is None:
                return span
            self.at = count.end()
            times = _largest(count)
            span *= max(times, 1)
            _check(times, span, self.text[start : self.at])

    def skip_class(self) -> None:
        depth = 1
        if self.peek() == "^":
            self.at += 1
        if self.peek() == "]":  # a leading ] is a literal
            self.at += 1
        while self.at < len(self.text) and depth:
            char = self.text[self.at]
            self.at += 1
            if char == "\\":
                self.skip_escape()
            elif char == "[":
                depth += 1
            elif char == "]":
                depth -= 1

    def skip_escape(self) -> None:
        if self.at >= len(self.text):
            return
        letter = self.text[self.at]
        self.at += 1
        if letter in "pPxu" and self.peek() == "{":  # \p{Greek}, \x{263a}: braces are not a count
            end = self.text.find("}", self.at)
            self.at = len(self.text) if end < 0 else end + 1

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""


def _lark_pieces(lark: str) -> Iterator[tuple[str, str]]:
    """("regex", body) for each /regex/ terminal and ("rules", text) for what
    lies between them; quoted strings and comments are dropped."""
    rules: list[str] = []
    at = 0
    while at < len(lark):
        char = lark[at]
        if char == '"':
            at = _end_of_quoted(lark, at, '"')
        elif lark.startswith("//", at):
            end = lark.find("\n", at)
            at = len(lark) if end < 0 else end
        elif char == "/":
            end = _end_of_quoted(lark, at, "/")
            yield "regex", lark[at + 1 : end - 1]
            at = end
        else:
            rules.append(char)
            at += 1
    yield "rules", "".join(rules)


def _end_of_quoted(text: str, start: int, quote: str) -> int:
    at = start + 1
    while at < len(text) and text[at] != quote:
        at += 2 if text[at] == "\\" else 1
    return min(at + 1, len(text))


def _rule_counts(rules: str) -> Iterator[tuple[int, str]]:
    for count in (*_COUNT.finditer(rules), *_LARK_RANGE.finditer(rules)):
        yield _largest(count), count.group(0)


def _largest(count: re.Match) -> int:
    """The larger bound of `{n}`, `{n,}`, `{n,m}` or `~ n..m`."""
    return max(int(number) for number in count.groups() if number and number.isdigit())
