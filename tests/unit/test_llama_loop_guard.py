"""The loop guard's min_pattern_size (llama.cpp's and vLLM's repetition option beside
max_pattern_size and min_count): shorter patterns are not counted, and it is bounded
like the others."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.engine.loop_guard import LoopGuard
from inferd.engine.sampling_params import SamplingParams, SamplingParamsError

PREFIX = [1, 2, 3]


def first_fire(tokens: list[int], max_size: int, min_count: int, min_size: int) -> int | None:
    guard = LoopGuard(max_size, min_count, min_size)
    fired = [guard.add(t) for t in tokens]
    return fired.index(True) if True in fired else None


def brute_force(output: list[int], max_size: int, min_count: int, min_size: int) -> bool:
    for size in range(min_size, max_size + 1):
        span = size * min_count
        if len(output) >= span and output[-span:] == output[-size:] * min_count:
            return True
    return False


def test_a_pattern_shorter_than_the_minimum_is_not_a_loop():
    tokens = PREFIX + [7] * 12  # one token, twelve times
    assert first_fire(tokens, 4, 3, 1) == len(PREFIX) + 2
    assert first_fire(tokens, 4, 3, 2) == len(PREFIX) + 5  # seen as "7 7" three times
    assert first_fire(tokens, 4, 3, 4) == len(PREFIX) + 11  # as "7 7 7 7" three times


def test_a_pattern_at_the_minimum_fires_at_its_count():
    tokens = PREFIX + [5, 6, 7] * 3
    assert first_fire(tokens, 3, 3, 3) == len(tokens) - 1
    assert first_fire(tokens[:-1], 3, 3, 3) is None


@settings(max_examples=150, deadline=None)
@given(tokens=st.lists(st.integers(0, 3), max_size=60), max_size=st.integers(1, 6), min_count=st.integers(2, 4),
       data=st.data())
def test_agrees_with_brute_force_after_every_token(tokens, max_size, min_count, data):
    min_size = data.draw(st.integers(1, max_size))
    guard = LoopGuard(max_size, min_count, min_size)
    for i, token in enumerate(tokens):
        assert guard.add(token) == brute_force(tokens[: i + 1], max_size, min_count, min_size)


@pytest.mark.parametrize("min_size", [0, 5])
def test_the_guard_refuses_a_minimum_outside_its_sizes(min_size):
    with pytest.raises(ValueError, match="min_pattern_size must be in"):
        LoopGuard(4, 2, min_size)


@pytest.mark.parametrize("fields, message", [
    (dict(max_pattern_size=4, min_count=2, min_pattern_size=5),
     "the loop guard's min_pattern_size must be in [0, max_pattern_size] (0 and 1 look for every pattern), got 5 with "
     "max_pattern_size 4"),
    (dict(max_pattern_size=4, min_count=2, min_pattern_size=-1), "min_pattern_size must be in"),
    (dict(min_pattern_size=2), "the loop guard needs max_pattern_size >= 1 and min_count >= 2"),
    (dict(max_pattern_size=4, min_count=2, min_pattern_size=True), "min_pattern_size must be an integer"),
])
def test_sampling_params_bound_it(fields, message):
    with pytest.raises(SamplingParamsError) as raised:
        SamplingParams(**fields).validate(100, 4096)
    assert message in str(raised.value)


@pytest.mark.parametrize("min_size", [0, 1, 4])
def test_sampling_params_accept_it_within_the_sizes(min_size):
    SamplingParams(max_pattern_size=4, min_count=2, min_pattern_size=min_size).validate(100, 4096)
