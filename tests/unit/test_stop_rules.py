"""Stop rules: which rule ends an output, in their order, and what text each releases."""

from __future__ import annotations

from inferd.engine.detokenizer import IncrementalDetokenizer
from inferd.engine.request import RequestStatus
from inferd.engine.sampling_params import SamplingParams
from inferd.engine.stop_rules import Finish, StopRules

EOS = 27
STOPPED, LENGTH = RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH


class Letters:
    """Token i is the i-th letter of the alphabet; EOS has no text."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + i - 1) for i in ids if 1 <= i <= 26)


def ids(text: str) -> list[int]:
    return [ord(c) - ord("a") + 1 for c in text]


def rules(max_model_len=100, **fields) -> StopRules:
    params = SamplingParams(**{"max_tokens": 50, **fields})
    detokenizer = IncrementalDetokenizer(
        Letters(), [1], stop=params.stop, include_stop_str_in_output=params.include_stop_str_in_output
    )
    return StopRules(params, detokenizer, frozenset({EOS}), max_model_len)


def feed(stop: StopRules, tokens, prompt_len=1, grammar_done_at=None):
    """Adds tokens until one ends the output: the text released and the finish."""
    text = ""
    for n, token in enumerate(tokens, start=1):
        piece, finish = stop.add(token, num_output_tokens=n, num_tokens=prompt_len + n,
                                 grammar_done=n == grammar_done_at)
        text += piece
        if finish is not None:
            return text, finish, n
    return text, None, len(tokens)


def test_eos_stops_without_its_text_unless_ignored():
    assert feed(rules(), ids("ab") + [EOS, 3]) == ("ab", Finish(STOPPED, EOS), 3)
    assert feed(rules(ignore_eos=True, max_tokens=4), ids("ab") + [EOS, 3]) == ("abc", Finish(LENGTH), 4)


def test_a_stop_token_releases_text_held_for_a_possible_stop_string():
    text, finish, n = feed(rules(stop=["xy"], stop_token_ids=[3]), ids("abx") + [3])
    assert (text, finish, n) == ("abx", Finish(STOPPED, 3), 4)


def test_a_stop_string_ends_the_text_before_it_or_after_it_when_included():
    assert feed(rules(stop=["cd"]), ids("abcde")) == ("ab", Finish(STOPPED, "cd"), 4)
    assert feed(rules(stop=["cd"], include_stop_str_in_output=True), ids("abcde")) == ("abcd", Finish(STOPPED, "cd"), 4)


def test_a_complete_grammar_stops_and_releases_what_was_held():
    assert feed(rules(stop=["cd"]), ids("abcq"), grammar_done_at=3) == ("abc", Finish(STOPPED), 3)


def test_the_loop_guard_stops_at_the_repeat():
    assert feed(rules(max_pattern_size=2, min_count=3), ids("xabababq")) == ("xababab", Finish(STOPPED), 7)


def test_max_tokens_and_a_full_context_finish_with_length():
    assert feed(rules(max_tokens=3), ids("abcdef")) == ("abc", Finish(LENGTH), 3)
    assert feed(rules(max_model_len=5, max_tokens=None), ids("abcdef")) == ("abcd", Finish(LENGTH), 4)


def test_earlier_rules_win_when_several_hold_at_once():
    at_max = {"max_tokens": 3}
    assert feed(rules(stop_token_ids=[3], **at_max), ids("abc"))[1] == Finish(STOPPED, 3)
    assert feed(rules(stop=["bc"], **at_max), ids("abc"))[1] == Finish(STOPPED, "bc")
    assert feed(rules(**at_max), ids("abc"), grammar_done_at=3)[1] == Finish(STOPPED)
    assert feed(rules(max_pattern_size=1, min_count=3, **at_max), ids("aaa"))[1] == Finish(STOPPED)
