"""The per-worker circuit breaker, on an injected clock."""

from __future__ import annotations

from inferd.router.breaker import CircuitBreaker


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=3, success_threshold=2, cooldown=5.0, clock=clock)


def test_consecutive_failures_open_it():
    b = breaker(Clock())
    for n in (1, 2):
        b.record_failure()
        assert (b.state, b.failures, b.allows()) == ("closed", n, True)
    b.record_failure()
    assert (b.state, b.failures, b.allows()) == ("open", 3, False)


def test_a_success_resets_the_failure_count():
    b = breaker(Clock())
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    assert (b.state, b.failures) == ("closed", 1)


def test_after_the_cooldown_it_is_half_open_and_successes_close_it():
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record_failure()
    clock.now += 4.999
    assert not b.allows()
    clock.now += 0.001
    assert b.allows()
    assert b.state == "half-open"
    b.record_success()
    assert (b.state, b.successes) == ("half-open", 1)
    b.record_success()
    assert (b.state, b.failures) == ("closed", 0)


def test_one_failure_while_half_open_opens_it_again_with_a_fresh_cooldown():
    clock = Clock()
    b = breaker(clock)
    for _ in range(3):
        b.record_failure()
    clock.now += 5.0
    assert b.allows()
    b.record_failure()
    assert (b.state, b.opened_at) == ("open", 105.0)
    clock.now += 4.0
    assert not b.allows()


def test_a_success_seen_while_open_starts_recovery():
    b = breaker(Clock())
    for _ in range(3):
        b.record_failure()
    b.record_success()
    assert (b.state, b.successes) == ("half-open", 1)
    b.record_success()
    assert b.state == "closed"
