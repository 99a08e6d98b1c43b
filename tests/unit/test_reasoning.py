"""Splitting <think>…</think> reasoning from content, whole and streamed."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as InnerTokenizer
from tokenizers import models, pre_tokenizers

from inferd.chat.reasoning import (
    ReasoningParser,
    ReasoningSplit,
    ThinkMarkers,
    prompt_opens_thinking,
    think_markers,
)
from inferd.models.tokenizer import Tokenizer

MARKERS = ThinkMarkers()

# (output, started, expected reasoning, expected content)
CASES = [
    pytest.param("<think>\nLet me add.\n</think>\n\nThe answer is 4.", False, "Let me add.", "The answer is 4.",
                 id="qwen3-style"),
    pytest.param("Let me add.\n</think>\n\nThe answer is 4.", True, "Let me add.", "The answer is 4.",
                 id="started-r1-style"),
    pytest.param("\nLet me add.\n</think>\n\n4", True, "Let me add.", "4", id="started-newline-in-output"),
    pytest.param("Hello\n\nworld\n", False, None, "Hello\n\nworld\n", id="no-markers"),
    pytest.param("\n\nHello", False, None, "\n\nHello", id="no-markers-leading-newlines-kept"),
    pytest.param("<think>\nstill thinking\n", False, "still thinking\n", None, id="unclosed"),
    pytest.param("still thinking", True, "still thinking", None, id="started-unclosed"),
    pytest.param("<think>\n\n</think>\n\nHi", False, None, "Hi", id="empty-reasoning"),
    pytest.param("<think>\na\n\nb\n</think>\nc\n\nd", False, "a\n\nb", "c\n\nd", id="inner-newlines-kept"),
    pytest.param("<think>\n\n  indented\n\n</think>\n\n\n  reply  \n", False, "  indented", "  reply  \n",
                 id="only-newline-runs-stripped"),
    pytest.param("<think>\r\nx\r\n</think>\r\ny", False, "\r\nx\r", "\r\ny", id="carriage-returns-kept"),
    pytest.param("<think> x </think> y", False, " x ", " y", id="spaces-kept"),
    pytest.param("Sure. <think>x</think>y", False, "x", "Sure. y", id="content-before-think"),
    pytest.param("<think>a</think>b<think>\nc\n</think>\nd", False, "ac", "bd", id="two-blocks"),
    pytest.param("<think>a<think>\nb</think>c", False, "ab", "c", id="start-inside-reasoning-removed"),
    pytest.param("a</think>\nb", False, None, "ab", id="stray-end-removed"),
    pytest.param("<think>a < b </thinking>", False, "a < b </thinking>", None, id="marker-lookalikes-are-text"),
    pytest.param("<think>x</thi", False, "x</thi", None, id="partial-marker-at-end-is-text"),
    pytest.param("abc <thi", False, None, "abc <thi", id="partial-start-at-end-is-text"),
    pytest.param("</think>", True, None, None, id="started-empty"),
    pytest.param("", False, None, None, id="nothing"),
]


def reference_split(text: str, started: bool) -> tuple[str | None, str | None]:
    """The documented rules, applied to whole segments between markers."""
    parts = re.split(f"({re.escape(MARKERS.start)}|{re.escape(MARKERS.end)})", text)
    segments, markers = parts[0::2], parts[1::2]
    reasoning, content = [], []
    in_reasoning = started
    for index, segment in enumerate(segments):
        if index > 0 or started:
            segment = segment.lstrip("\n")
        following = markers[index] if index < len(markers) else None
        if in_reasoning and following == MARKERS.end:
            segment = segment.rstrip("\n")
        (reasoning if in_reasoning else content).append(segment)
        if following is not None:
            in_reasoning = following == MARKERS.start
    return "".join(reasoning) or None, "".join(content) or None


def stream(chunks: list[str], started: bool) -> tuple[list[ReasoningSplit], tuple[str | None, str | None]]:
    parser = ReasoningParser(MARKERS, started=started)
    deltas = [parser.feed(chunk) for chunk in chunks] + [parser.finish()]
    reasoning = "".join(d.reasoning for d in deltas if d.reasoning is not None) or None
    content = "".join(d.content for d in deltas if d.content is not None) or None
    return deltas, (reasoning, content)


def as_pair(split: ReasoningSplit) -> tuple[str | None, str | None]:
    return split.reasoning, split.content


# --- whole outputs -----------------------------------------------------------

@pytest.mark.parametrize(("text", "started", "reasoning", "content"), CASES)
def test_parse(text, started, reasoning, content):
    assert as_pair(ReasoningParser(MARKERS, started=started).parse(text)) == (reasoning, content)


@pytest.mark.parametrize(("text", "started", "reasoning", "content"), CASES)
def test_reference_rules_match_the_expected_cases(text, started, reasoning, content):
    # Keeps the reference used by the property tests honest.
    assert reference_split(text, started) == (reasoning, content)


def test_parse_leaves_the_stream_alone():
    parser = ReasoningParser(MARKERS)
    assert as_pair(parser.feed("<think>\nabc")) == ("abc", None)
    assert as_pair(parser.parse("plain")) == (None, "plain")
    assert as_pair(parser.feed("\n</think>\n\nreply")) == (None, "reply")
    assert as_pair(parser.finish()) == (None, None)


# --- streaming ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "started", "reasoning", "content"), CASES)
def test_every_two_piece_split_streams_to_the_same_split(text, started, reasoning, content):
    for cut in range(len(text) + 1):
        _, joined = stream([text[:cut], text[cut:]], started)
        assert joined == (reasoning, content), f"cut at {cut}"


@pytest.mark.parametrize(("text", "started", "reasoning", "content"), CASES)
def test_one_character_at_a_time_streams_to_the_same_split(text, started, reasoning, content):
    deltas, joined = stream(list(text), started)
    assert joined == (reasoning, content)
    for delta in deltas:
        for field in (delta.reasoning, delta.content):
            assert field is None or field != ""  # nothing to say is None, never ""


def test_stream_releases_text_as_soon_as_it_is_certain():
    parser = ReasoningParser(MARKERS)
    steps = [
        ("Hi <", (None, "Hi ")),  # "<" may begin <think>
        ("thi", (None, None)),
        ("nk>", (None, None)),
        ("\n", (None, None)),  # formatting after <think>
        ("one\n", ("one", None)),  # the newline may precede </think>
        ("two", ("\ntwo", None)),  # it did not
        ("\n</", (None, None)),
        ("think>", (None, None)),
        ("\n\n", (None, None)),  # formatting after </think>
        ("Reply\n", (None, "Reply\n")),  # content keeps trailing newlines
        ("end <th", (None, "end ")),
    ]
    for delta, expected in steps:
        assert as_pair(parser.feed(delta)) == expected, delta
    assert as_pair(parser.finish()) == (None, "<th")


def test_marker_split_across_many_deltas_never_leaks():
    parser = ReasoningParser(MARKERS, started=True)
    outputs = [as_pair(parser.feed(piece)) for piece in ["idea", "<", "/", "th", "in", "k", ">", "ok"]]
    assert outputs == [("idea", None)] + [(None, None)] * 6 + [(None, "ok")]


def test_a_false_start_is_released_once_it_stops_matching():
    parser = ReasoningParser(MARKERS)
    assert as_pair(parser.feed("a </thi")) == (None, "a ")
    assert as_pair(parser.feed("s")) == (None, "</this")


def test_finish_releases_held_newlines_of_an_unclosed_block():
    parser = ReasoningParser(MARKERS)
    assert as_pair(parser.feed("<think>x\n\n")) == ("x", None)
    assert as_pair(parser.finish()) == ("\n\n", None)


MARKER_HEAVY_PIECES = ["<think>", "</think>", "<", "</", "<th", "think", "ink>", ">", "/", "\n", "\n\n", "a", " ", "\r"]


@st.composite
def output_and_chunks(draw):
    text = "".join(draw(st.lists(st.sampled_from(MARKER_HEAVY_PIECES), max_size=25)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=400, deadline=None)
@given(output_and_chunks(), st.booleans())
@example(("<think><th<think>ink>", ["<think><th<think>ink>"]), False)
def test_random_chunkings_agree_with_parse_and_the_rules(text_and_chunks, started):
    text, chunks = text_and_chunks
    deltas, joined = stream(chunks, started)
    assert joined == as_pair(ReasoningParser(MARKERS, started=started).parse(text))
    assert joined == reference_split(text, started)
    for delta in deltas:
        for field, whole in zip((delta.reasoning, delta.content), joined):
            assert field is None or field  # never an empty string
            # Marker text in a delta only when the text around a removed marker
            # spells one (e.g. "<th" + "<think>" + "ink>"), which the whole parse shows too.
            if field and (MARKERS.start in field or MARKERS.end in field):
                assert MARKERS.start in whole or MARKERS.end in whole


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.booleans())
def test_text_without_markers(text, started):
    text = text.replace("<", "(")
    expected = (text.lstrip("\n") or None, None) if started else (None, text or None)
    assert as_pair(ReasoningParser(MARKERS, started=started).parse(text)) == expected


# --- other markers -----------------------------------------------------------

def test_custom_markers():
    markers = ThinkMarkers(start="[R]", end="[/R]")
    parser = ReasoningParser(markers)
    assert as_pair(parser.parse("[R]\nwhy\n[/R]\n\nthat <think>")) == ("why", "that <think>")


@pytest.mark.parametrize(("start", "end"), [("", "</think>"), ("<think>", ""), ("<t>", "<t>x"), ("x</t>", "</t>")])
def test_markers_must_be_nonempty_and_not_contain_each_other(start, end):
    with pytest.raises(ValueError):
        ThinkMarkers(start=start, end=end)


# --- detection ---------------------------------------------------------------

def word_tokenizer(extra: list[str]) -> Tokenizer:
    inner = InnerTokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    inner.add_tokens(extra)
    return Tokenizer(inner, bos_token_id=None, eos_token_id=None, add_bos=False, chat_template=None)


def test_think_markers_found_with_their_ids():
    tokenizer = word_tokenizer(["<think>", "</think>"])
    assert think_markers(tokenizer) == ThinkMarkers("<think>", "</think>", start_id=2, end_id=3)


@pytest.mark.parametrize("extra", [[], ["<think>"], ["</think>"]])
def test_no_think_markers_without_both_tokens(extra):
    assert think_markers(word_tokenizer(extra)) is None


@pytest.mark.parametrize(
    ("prompt", "opens"),
    [
        ("<|im_start|>assistant\n<think>\n", True),  # Qwen3 thinking templates
        ("<｜Assistant｜><think>", True),  # DeepSeek-R1
        ("<｜Assistant｜><think>\n \t\n", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),  # thinking switched off
        ("<|im_start|>assistant\n", False),
        ("<|im_start|>user\nwhat does <think> do?<|im_end|>\n<|im_start|>assistant\n", False),
        ("<think>\nplanning", False),  # only a prompt that ends on the marker counts
        ("", False),
    ],
)
def test_prompt_opens_thinking(prompt, opens):
    assert prompt_opens_thinking(prompt, MARKERS) is opens


def test_prompt_opens_thinking_with_custom_markers():
    assert prompt_opens_thinking("A: [R]\n", ThinkMarkers(start="[R]", end="[/R]")) is True
    assert prompt_opens_thinking("A: <think>\n", ThinkMarkers(start="[R]", end="[/R]")) is False
