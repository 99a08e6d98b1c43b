"""Residency of the models a server loads on demand (serving.model_host), with
stand-in engines: who is loaded, who is unloaded and why, and what waits."""

from __future__ import annotations

import asyncio

import pytest

from inferd.config import ServeConfig
from inferd.http.errors import APIError
from inferd.server.hosted_models import parse_size
from inferd.serving.keep_alive import FOREVER, parse_keep_alive
from inferd.serving.model_host import ChatModel, HostedModel, ModelHost

MB = 2**20


class _Engine:
    def __init__(self):
        self._streams = {}
        self.stopped = False

    def shutdown(self):
        self.stopped = True


class _Host(ModelHost):
    """Loads instantly (or when `gate` opens), each model weighing its file size."""

    def __init__(self, models, budget=1000 * MB, max_loaded=0, keep_alive="5m"):
        config = ServeConfig(max_loaded_models=max_loaded, keep_alive=keep_alive)
        super().__init__(config, models, budget, loader=None)
        self.built: list[str] = []
        self.gate: asyncio.Event | None = None

    def _build(self, model):
        self.built.append(model.name)
        return ChatModel(self.config, model.names, engine=_Engine())

    async def _load(self, model):
        if self.gate is not None:
            await self.gate.wait()
        await super()._load(model)

    def _measure(self, chat):
        return next(m.file_bytes for m in self.models if m.names == chat.names)

    def _free(self, chat):
        chat.engine.shutdown()


def models(*sizes_mb: int) -> list[HostedModel]:
    return [HostedModel(f"m{i}", f"m{i}", size * MB) for i, size in enumerate(sizes_mb)]


def loaded(host) -> list[str]:
    return [m.name for m in host.loaded()]


async def use(host, name, **kw):
    model = host.find(name)
    await host.acquire(model, **kw)
    await host.release(model)


@pytest.mark.parametrize(("value", "seconds"), [
    ("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), (300, 300.0),
    ("300", 300.0), (0, 0.0), ("0", 0.0), ("0s", 0.0), (-1, FOREVER), ("-1", FOREVER), ("-5m", FOREVER),
])
def test_keep_alive_reads_ollamas_forms(value, seconds):
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m5", "", True])
def test_a_keep_alive_that_is_no_duration_says_what_is(value):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_keep_alive(value)


def test_memory_budget_sizes():
    assert [parse_size(s) for s in ("8G", "512M", "1.5GiB", "100", "2k")] == [8 << 30, 512 << 20, 3 << 29, 100, 2048]
    with pytest.raises(ValueError, match="--memory-budget 'lots' is not a size"):
        parse_size("lots")


def test_the_least_recently_used_idle_model_goes_first_under_max_loaded_models():
    async def go():
        host = _Host(models(10, 10, 10), max_loaded=2)
        for name in ("m0", "m1", "m0", "m2"):  # m1 is the least recently used when m2 comes
            await use(host, name)
        return loaded(host), host.unloads, host.built

    assert asyncio.run(go()) == (["m0", "m2"], {"evicted": 1}, ["m0", "m1", "m2"])


def test_the_memory_budget_unloads_until_the_new_model_fits():
    async def go():
        host = _Host(models(40, 40, 70), budget=100 * MB)
        await use(host, "m0")
        await use(host, "m1")
        await use(host, "m2")  # 70 MB: both 40 MB models must go
        return loaded(host), host.unloads

    assert asyncio.run(go()) == (["m2"], {"evicted": 2})


def test_a_model_that_cannot_fit_alone_is_507_with_both_sizes():
    async def go():
        host = _Host(models(10, 300), budget=200 * MB)
        await use(host, "m0")
        with pytest.raises(APIError) as error:
            await use(host, "m1")
        return error.value, loaded(host), host.find("m1").leases

    error, still, leases = asyncio.run(go())
    assert error.status == 507
    assert "'m1' needs 300 MiB" in error.message and "200 MiB" in error.message and "--memory-budget" in error.message
    assert (still, leases) == (["m0"], 0)


def test_a_model_in_use_is_not_unloaded_the_next_load_waits_for_it():
    async def go():
        host = _Host(models(10, 10), max_loaded=1)
        m0 = host.find("m0")
        await host.acquire(m0)  # a request in flight on m0
        waiting = asyncio.ensure_future(use(host, "m1"))
        await asyncio.sleep(0.3)
        during = (loaded(host), waiting.done(), m0.chat.engine.stopped)
        await host.release(m0)
        await asyncio.wait_for(waiting, 5)
        return during, loaded(host), host.unloads

    assert asyncio.run(go()) == ((["m0"], False, False), ["m1"], {"evicted": 1})


def test_an_engine_with_streams_open_counts_as_in_use():
    async def go():
        host = _Host(models(10, 10), max_loaded=1)
        await use(host, "m0")
        host.find("m0").chat.engine._streams["r1"] = object()  # a request still reading its stream
        waiting = asyncio.ensure_future(use(host, "m1"))
        await asyncio.sleep(0.2)
        before = loaded(host)
        host.find("m0").chat.engine._streams.clear()
        await asyncio.wait_for(waiting, 5)
        return before, loaded(host)

    assert asyncio.run(go()) == (["m0"], ["m1"])


def test_requests_for_a_loading_model_wait_for_the_one_load():
    async def go():
        host = _Host(models(10))
        host.gate = asyncio.Event()
        first = [asyncio.ensure_future(use(host, "m0")) for _ in range(5)]
        await asyncio.sleep(0.05)
        waiting = not any(t.done() for t in first)
        host.gate.set()
        await asyncio.gather(*first)
        return waiting, host.built, host.find("m0").leases

    assert asyncio.run(go()) == (True, ["m0"], 0)


def test_keep_alive_zero_unloads_when_the_request_ends_and_expiry_unloads_idle_models():
    async def go():
        host = _Host(models(10, 10), keep_alive="150ms")
        await use(host, "m0", keep_alive=0)
        after_zero = loaded(host)
        await use(host, "m0")  # a request without keep_alive has the server's again
        assert (loaded(host), host.find("m0").keep_alive) == (["m0"], 0.15)
        await host.unload(host.find("m0"), "requested")
        await use(host, "m1")
        await asyncio.sleep(0.05)
        kept = loaded(host)
        await asyncio.sleep(0.6)  # past 150 ms, and a sweep
        return after_zero, kept, loaded(host), host.unloads

    assert asyncio.run(go()) == ([], ["m1"], [], {"requested": 2, "expired": 1})


def test_keep_alive_forever_keeps_a_model_past_the_default():
    async def go():
        host = _Host(models(10), keep_alive="50ms")
        await use(host, "m0", keep_alive=FOREVER)
        await asyncio.sleep(0.4)
        return loaded(host), host.find("m0").expires_at

    assert asyncio.run(go()) == (["m0"], None)


def test_names_with_ollamas_default_tag_find_the_model():
    host = _Host([HostedModel("tiny", "tiny:latest", 1, aliases=("tiny:latest",))])
    assert host.find("tiny:latest") is host.find("tiny") is not None
    assert host.find("other") is None


def test_the_roster_follows_the_store_keeping_each_models_state():
    async def go():
        host = _Host(models(10, 10, 10))
        roster = {"now": models(10, 10, 10), "stamp": 0}
        host.follow(lambda: roster["stamp"], lambda: roster["now"])
        await use(host, "m0"), await use(host, "m1")
        m0, m1 = host.find("m0"), host.find("m1")
        m1.leases += 1  # a request runs on m1
        roster["now"] = [HostedModel("m0", "m0-v2", 20 * MB, aliases=("zero",)), HostedModel("new", "new", 10 * MB)]
        await host.sync()  # the stamp has not moved: nothing is read
        unchanged = [m.name for m in host.models]
        roster["stamp"] = 1
        await host.sync()
        during = [m.name for m in host.models], dict(host.unloads)
        m1.leases -= 1
        roster["stamp"] = 2
        await host.sync()
        return unchanged, during, [m.name for m in host.models], (m0.source, host.find("zero") is m0), host.unloads

    unchanged, during, after, renamed, unloads = asyncio.run(go())
    assert unchanged == ["m0", "m1", "m2"]
    assert during == (["m0", "new", "m1"], {})  # removed: m2 at once, m1 (in use) once its request ends
    assert after == ["m0", "new"] and unloads == {"requested": 1}  # then unloaded
    assert renamed == ("m0-v2", True)  # a loaded model takes what its name means now for its next load


def test_the_servers_own_model_once_unloaded_loads_on_demand_outside_the_limits():
    """Loaded at start before any limit, it counts for none when it loads again, and is never evicted."""
    async def go():
        host = _Host(models(10, 10), budget=15 * MB, max_loaded=1)
        await use(host, "m0")
        own = HostedModel("own", "own-path", 50 * MB, aliases=("own-alias",))
        await host.adopt_own(own, ChatModel(host.config, own.names, engine=_Engine()))
        after_unload = (loaded(host), host.find("own-alias") is own, dict(host.unloads))
        await use(host, "own")  # bigger than the budget, past --max-loaded-models: no 507, m0 stays
        both = sorted(loaded(host))
        await use(host, "m1")  # room for m1 comes from m0, not from the server's own
        return after_unload, both, sorted(loaded(host)), own.expires_at, host.unloads

    assert asyncio.run(go()) == ((["m0"], True, {"requested": 1}), ["m0", "own"], ["m1", "own"], None,
                                 {"requested": 1, "evicted": 1})

