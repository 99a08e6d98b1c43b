"""Counters in memory: fixed windows that start with their first take and
end `expiry` seconds later, steps that take all or nothing, give-backs only
to the window taken from, leases dropped at zero, ended windows swept; and
no work beyond the step's own counters (no task scanning every key)."""

from __future__ import annotations

import asyncio

from inferd.tenants.counters import SWEEP_SECONDS, MemoryCounters, Short, Want


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coro):
    return asyncio.run(coro)


def test_a_window_starts_with_its_first_take_and_ends_after_its_expiry():
    clock = Clock()
    counters = MemoryCounters(clock)

    async def go():
        first = await counters.take([Want("rpm", 60, 1, 2)])
        assert (first[0].count, first[0].reset, first[0].window) == (1, 1060.0, 1060.0)
        clock.now += 30
        assert (await counters.take([Want("rpm", 60, 1, 2)]))[0].count == 2
        refused = await counters.take([Want("rpm", 60, 1, 2)])
        assert refused == Short(0, 30.0)
        clock.now += 30  # the window ends: a new one, from zero
        renewed = await counters.take([Want("rpm", 60, 1, 2)])
        assert (renewed[0].count, renewed[0].reset) == (1, 1120.0)

    run(go())


def test_a_refused_step_takes_nothing_from_any_counter():
    counters = MemoryCounters(Clock())

    async def go():
        await counters.take([Want("tpm", 60, 90, 100)])
        refused = await counters.take([Want("lease", 3600, 1, 5, lease=True), Want("tpm", 60, 20, 100)])
        assert isinstance(refused, Short) and refused.index == 1
        assert (await counters.get("lease"), await counters.get("tpm")) == (0, 90)

    run(go())


def test_giving_back_reaches_only_the_window_it_was_taken_from():
    clock = Clock()
    counters = MemoryCounters(clock)

    async def go():
        old = (await counters.take([Want("tpm", 60, 50)]))[0]
        await counters.give_back([(old, 30)])
        assert await counters.get("tpm") == 20
        clock.now += 60
        await counters.take([Want("tpm", 60, 5)])  # the next minute's window
        await counters.give_back([(old, 20)])  # the old window's refund: not this one's
        assert await counters.get("tpm") == 5

    run(go())


def test_a_lease_back_at_zero_is_dropped_and_never_goes_below():
    counters = MemoryCounters(Clock())

    async def go():
        lease = Want("concurrent", 86400, 1, 2, lease=True)
        a, b = (await counters.take([lease]))[0], (await counters.take([lease]))[0]
        await counters.give_back([(a, 1), (b, 1), (b, 1)])
        assert await counters.get("concurrent") == 0 and "concurrent" not in counters._counters

    run(go())


def test_ended_windows_of_quiet_keys_are_swept():
    clock = Clock()
    counters = MemoryCounters(clock)

    async def go():
        for i in range(100):
            await counters.take([Want(f"quiet-{i}", 60, 1)])
        await counters.add("daily", 86400, 7)
        clock.now += SWEEP_SECONDS + 1
        await counters.take([Want("busy", 60, 1)])
        assert sorted(counters._counters) == ["busy", "daily"]

    run(go())


def test_a_step_schedules_no_work_on_the_event_loop():
    counters = MemoryCounters(Clock())

    async def go():
        for i in range(1000):
            await counters.take([Want(f"key-{i}", 60, 1, 10)])
        before = asyncio.all_tasks()
        await counters.take([Want("key-0", 60, 1, 10)])
        await counters.give_back([])
        return asyncio.all_tasks() - before

    assert run(go()) == set()
