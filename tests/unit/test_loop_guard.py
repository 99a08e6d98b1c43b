"""The repetition loop detector: where it fires, where it must not, and agreement with a brute-force check."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.engine.loop_guard import LoopGuard

MAX_PATTERN = 8
MIN_COUNT = 4
PREFIX = [1, 2, 3]  # shares no token with the patterns below


def verdicts(guard: LoopGuard, tokens: list[int]) -> list[bool]:
    return [guard.add(token) for token in tokens]


def first_fire(tokens: list[int], max_pattern_size: int = MAX_PATTERN, min_count: int = MIN_COUNT) -> int | None:
    fired = verdicts(LoopGuard(max_pattern_size, min_count), tokens)
    return fired.index(True) if True in fired else None


def ends_in_loop(output: list[int], max_pattern_size: int, min_count: int) -> bool:
    """Brute force: some last-p-token pattern fills the last p * min_count tokens."""
    for size in range(1, max_pattern_size + 1):
        span = size * min_count
        if len(output) >= span and output[-span:] == output[-size:] * min_count:
            return True
    return False


def distinct_pattern(size: int) -> list[int]:
    return list(range(100, 100 + size))


@pytest.mark.parametrize("size", range(1, MAX_PATTERN + 1))
def test_fires_on_the_last_token_of_the_min_count_th_copy(size):
    tokens = PREFIX + distinct_pattern(size) * MIN_COUNT
    assert first_fire(tokens) == len(PREFIX) + size * MIN_COUNT - 1


@pytest.mark.parametrize("size", range(1, MAX_PATTERN + 1))
def test_one_copy_short_does_not_fire(size):
    pattern = distinct_pattern(size)
    # min_count - 1 copies, then all but the last token of another copy, then something else.
    tokens = PREFIX + pattern * (MIN_COUNT - 1) + pattern[:-1] + [999]
    assert first_fire(tokens) is None


def test_a_pattern_longer_than_the_maximum_never_fires():
    tokens = PREFIX + distinct_pattern(MAX_PATTERN + 1) * 20
    assert first_fire(tokens) is None


def test_the_same_pattern_fires_once_the_maximum_allows_it():
    size = MAX_PATTERN + 1
    tokens = PREFIX + distinct_pattern(size) * MIN_COUNT
    assert first_fire(tokens, max_pattern_size=size) == len(PREFIX) + size * MIN_COUNT - 1


def test_a_pattern_with_repeated_tokens_fires_at_its_own_period():
    # [5, 5] alone never reaches four in a row; the period-3 pattern does, at token 12.
    assert first_fire([5, 5, 6] * MIN_COUNT) == 3 * MIN_COUNT - 1


def test_min_count_two():
    assert first_fire([1, 1], min_count=2) == 1
    assert first_fire([1, 2, 1, 2], min_count=2) == 3
    assert first_fire([1, 2, 3, 1, 2], min_count=2) is None


def test_a_break_restarts_the_count():
    guard = LoopGuard(MAX_PATTERN, MIN_COUNT)
    assert verdicts(guard, [7, 7, 7, 8, 7, 7, 7]) == [False] * 7
    assert guard.add(7) is True  # four 7s after the break


def test_reports_the_loop_while_it_lasts_and_not_after_it_breaks():
    guard = LoopGuard(MAX_PATTERN, MIN_COUNT)
    assert verdicts(guard, [4] * 6) == [False, False, False, True, True, True]
    assert guard.add(9) is False
    # The 4s before the 9 no longer count: four fresh ones are needed.
    assert verdicts(guard, [4] * 4) == [False, False, False, True]


def test_a_loop_of_another_size_after_a_break_fires_at_its_own_count():
    guard = LoopGuard(MAX_PATTERN, MIN_COUNT)
    assert verdicts(guard, [1, 2] * 3 + [3]) == [False] * 7
    assert verdicts(guard, [1, 2, 3] * 3) == [False] * 8 + [True]  # [1, 2, 3] four times, the first ending at the 3


@pytest.mark.parametrize(("max_pattern_size", "min_count"), [(0, 4), (-1, 4), (8, 1), (8, 0)])
def test_rejects_settings_that_mean_nothing(max_pattern_size, min_count):
    with pytest.raises(ValueError):
        LoopGuard(max_pattern_size, min_count)


def test_state_does_not_grow_with_the_output():
    # 256 + (i * 7919 mod 700): every 700 consecutive tokens differ, so nothing loops.
    def token(i: int) -> int:
        return 256 + (i * 7919) % 700

    guard = LoopGuard(MAX_PATTERN, MIN_COUNT)
    assert not any(guard.add(token(i)) for i in range(1_000))
    size_early = len(pickle.dumps(guard))
    assert not any(guard.add(token(i)) for i in range(1_000, 100_000))
    assert len(pickle.dumps(guard)) == size_early


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 2), max_size=80),
    max_pattern_size=st.integers(1, 6),
    min_count=st.integers(2, 5),
)
def test_agrees_with_brute_force_after_every_token(tokens, max_pattern_size, min_count):
    guard = LoopGuard(max_pattern_size, min_count)
    for end in range(1, len(tokens) + 1):
        assert guard.add(tokens[end - 1]) == ends_in_loop(tokens[:end], max_pattern_size, min_count)


@settings(max_examples=200, deadline=None)
@given(
    pattern=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    copies=st.integers(1, 6),
    prefix=st.lists(st.integers(0, 3), max_size=10),
)
def test_agrees_with_brute_force_on_built_loops(pattern, copies, prefix):
    # Random tokens rarely loop; built ones make the True side common.
    tokens = prefix + pattern * copies
    guard = LoopGuard(6, 3)
    for end in range(1, len(tokens) + 1):
        assert guard.add(tokens[end - 1]) == ends_in_loop(tokens[:end], 6, 3)
