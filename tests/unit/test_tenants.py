"""The tenants package on its own: key records and their validation, the
SQLite store (hashes only, survives reopening), the key ring's management
rules, the limiter's windows, refunds and leases, and the ledger."""

from __future__ import annotations

import asyncio
import math

import pytest

from inferd.tenants.gate import Tenants, Ticket
from inferd.tenants.keyring import KeyRing, LastAdminKey
from inferd.tenants.keys import InvalidField, Limits, changes_from, check_name
from inferd.tenants.limiter import Limiter, duration, seconds_to_midnight, utc_day
from inferd.tenants.refused import Refused
from inferd.tenants.secrets import PREFIX, hash_secret, new_secret
from inferd.tenants.store import DuplicateKey, KeyStore
from inferd.tenants.store_watch import StoreWatch
from polling import wait_for


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coro):
    return asyncio.run(coro)


def test_secrets_are_long_prefixed_and_distinct():
    a, b = new_secret(), new_secret()
    assert a.startswith(PREFIX) and b.startswith(PREFIX) and a != b
    assert len(a) - len(PREFIX) >= 43  # 32 random bytes, base64url
    assert hash_secret(a) == hash_secret(a.encode()) != hash_secret(b)


@pytest.mark.parametrize("name", ["a", "team.prod-1_x", "A" * 64])
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "has space", "slash/no", "é", "A" * 65, None, 3])
def test_bad_names_name_the_field(name):
    with pytest.raises(InvalidField) as e:
        check_name(name)
    assert e.value.field == "name"


@pytest.mark.parametrize("body,field", [
    ({"rpm": -1}, "rpm"), ({"tpm": 1.5}, "tpm"), ({"limits": {"max_concurrent": "2"}}, "max_concurrent"),
    ({"limits": {"burst": 2}}, "limits.burst"), ({"scopes": "m"}, "scopes"), ({"admin": "yes"}, "admin"),
    ({"expires_in": 0}, "expires_in"), ({"colour": 1}, "colour"), ({"expires_at": 1e12}, "expires_at"),
])
def test_bad_fields_are_named(body, field):
    with pytest.raises(InvalidField) as e:
        changes_from(body, creating=True)
    assert e.value.field == field


def test_changes_read_nested_and_flat_limits():
    changes = changes_from({"name": "k", "scopes": ["m", "m"], "rpm": 3, "limits": {"tpm": 100}}, creating=True)
    assert changes == {"scopes": ("m",), "rpm": 3, "tpm": 100}
    with pytest.raises(InvalidField):
        changes_from({"name": "k"}, creating=False)  # a key is not renamed


def test_the_store_keeps_hashes_only_and_survives_reopening(tmp_path):
    ring = KeyRing(KeyStore.in_dir(tmp_path), bootstrap=["boot-secret"])
    key, secret = ring.add("alice", {"rpm": 5, "scopes": ("m",)})
    ring.used(key, 1234.0)
    ring.store.touch(ring.take_last_used())
    ring.store.close()
    data = (tmp_path / "tenants.sqlite3").read_bytes() + (tmp_path / "tenants.sqlite3-wal").read_bytes() \
        if (tmp_path / "tenants.sqlite3-wal").exists() else (tmp_path / "tenants.sqlite3").read_bytes()
    assert secret.encode() not in data and b"boot-secret" not in data
    again = KeyRing(KeyStore.in_dir(tmp_path))
    found = again.find(secret.encode())
    assert found.name == "alice" and found.limits == Limits(rpm=5) and found.scopes == ("m",)
    assert found.last_used_at == 1234.0
    assert [k.name for k in again.all()] == ["alice"]  # bootstrap keys are never stored


def test_rotation_kills_the_old_secret_at_once(tmp_path):
    ring = KeyRing(KeyStore.in_dir(tmp_path), bootstrap=["b"])
    _, old = ring.add("k", {})
    _, new = ring.rotate("k")
    assert ring.find(old.encode()) is None and ring.find(new.encode()).name == "k"
    assert KeyRing(KeyStore.in_dir(tmp_path)).find(old.encode()) is None


def test_duplicates_bootstrap_edits_and_the_last_admin_are_refused(tmp_path):
    ring = KeyRing(KeyStore.in_dir(tmp_path))
    ring.add("root", {"admin": True})
    with pytest.raises(DuplicateKey):
        ring.add("root", {})
    with pytest.raises(LastAdminKey):
        ring.remove("root")
    with pytest.raises(LastAdminKey):
        ring.update("root", {"disabled": True})
    ring.add("second", {"admin": True})
    ring.remove("root")
    boot = KeyRing(bootstrap=["s"])
    with pytest.raises(InvalidField):
        boot.remove(boot.all()[0].name)


def test_a_store_that_is_not_sqlite_names_the_file(tmp_path):
    (tmp_path / "tenants.sqlite3").write_bytes(b"not a database" * 100)
    from inferd.tenants.store import TenantStoreError

    with pytest.raises(TenantStoreError, match="tenants.sqlite3"):
        KeyStore.in_dir(tmp_path)


def key_with(**limits):
    ring = KeyRing()
    key, _ = ring.add("k", limits)
    return key


def test_rpm_refuses_the_next_request_with_retry_after_and_refusals_cost_nothing():
    clock = Clock()
    limiter = Limiter(clock=clock)
    key = key_with(rpm=2)

    async def go():
        first = await limiter.acquire(key, 0)
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        await limiter.acquire(key, 0)
        for _ in range(3):
            with pytest.raises(Refused) as e:
                await limiter.acquire(key, 0)
        assert e.value.status == 429 and e.value.kind == "requests" and e.value.code == "rate_limit_exceeded"
        assert 1 <= int(e.value.headers["Retry-After"]) <= 60
        assert e.value.headers["x-ratelimit-remaining-requests"] == "0"

    run(go())


def test_tokens_are_reserved_then_settled_to_what_was_used():
    limiter = Limiter()
    key = key_with(tpm=100, daily_tokens=1000)

    async def go():
        held = await limiter.acquire(key, 80)
        assert held.headers["x-ratelimit-remaining-tokens"] == "20"
        with pytest.raises(Refused) as e:
            await limiter.acquire(key, 30)
        assert e.value.kind == "tokens"
        await limiter.settle(held, 10)  # 70 given back
        second = await limiter.acquire(key, 30)
        assert second.headers["x-ratelimit-remaining-tokens"] == "60"
        await limiter.settle(second, 30)
        daily = f"LIMITER/k/daily/{utc_day(limiter.clock())}/1000/1/day"
        assert await limiter.counters.get(daily) == 40
        with pytest.raises(Refused, match="more than this key's 100 tokens per minute"):
            await limiter.acquire(key, 101)

    run(go())


def test_daily_tokens_run_out_until_utc_midnight():
    clock = Clock(1_800_000_000.0)
    limiter = Limiter(clock=clock)
    key = key_with(daily_tokens=50)

    async def go():
        await limiter.settle(await limiter.acquire(key, 50), 50)
        with pytest.raises(Refused) as e:
            await limiter.acquire(key, 1)
        assert e.value.kind == "daily_tokens"
        assert int(e.value.headers["Retry-After"]) == math.ceil(seconds_to_midnight(clock.now))
        clock.now += seconds_to_midnight(clock.now) + 1  # a new UTC day, a new counter
        await limiter.acquire(key, 1)

    run(go())


def test_concurrency_leases_are_given_back():
    limiter = Limiter()
    key = key_with(max_concurrent=2)

    async def go():
        a, b = await limiter.acquire(key, 0), await limiter.acquire(key, 0)
        with pytest.raises(Refused) as e:
            await limiter.acquire(key, 0)
        assert e.value.kind == "concurrency" and await limiter.in_flight(key) == 2
        await limiter.settle(a, 0)
        await limiter.settle(a, 0)  # twice is once
        c = await limiter.acquire(key, 0)
        await limiter.settle(b, 0)
        await limiter.settle(c, 0)
        assert await limiter.in_flight(key) == 0

    run(go())


def test_a_refusal_for_tokens_gives_back_the_lease_and_the_request():
    limiter = Limiter()
    key = key_with(max_concurrent=1, rpm=5, tpm=10)

    async def go():
        with pytest.raises(Refused):
            await limiter.acquire(key, 11)
        assert await limiter.in_flight(key) == 0
        held = await limiter.acquire(key, 5)
        assert held.headers["x-ratelimit-remaining-requests"] == "4"

    run(go())


def test_gate_identifies_scopes_and_ledgers(tmp_path):
    clock = Clock()
    ring = KeyRing(KeyStore.in_dir(tmp_path))
    tenants = Tenants(ring, Limiter(clock=clock), clock=clock)
    key, secret = ring.add("k", {"scopes": ("m",), "expires_at": clock.now + 10})
    _, off = ring.add("off", {"disabled": True})

    async def go():
        with pytest.raises(Refused, match="needs an API key"):
            tenants.identify([])
        with pytest.raises(Refused, match="invalid API key"):
            tenants.identify([b"nope"])
        with pytest.raises(Refused, match="disabled"):
            tenants.identify([off.encode()])
        ticket = Ticket(tenants.identify([b"nope", secret.encode()]))
        with pytest.raises(Refused) as e:
            await tenants.admit(ticket, "other", 5)
        assert e.value.status == 403
        await tenants.admit(ticket, "m", 5)
        ticket.meters.append(lambda: (3, 4, 1))
        await tenants.settle(ticket, 200)
        clock.now += 11
        with pytest.raises(Refused, match="expired"):
            tenants.identify([secret.encode()])

    run(go())
    tenants.close()
    row, refused = KeyStore.in_dir(tmp_path).usage()
    assert (row.key, row.model, row.requests, row.prompt_tokens, row.completion_tokens, row.cached_tokens,
            row.errors) == ("k", "m", 1, 3, 4, 1, 0)
    assert (refused.model, refused.requests, refused.errors) == ("other", 1, 1)  # the 403, held nothing


def test_in_one_step_a_scope_refusal_charges_nothing_and_a_limit_refusal_takes_nothing():
    limiter = Limiter()
    tenants = Tenants(KeyRing(), limiter)
    key, secret = tenants.ring.add("k", {"scopes": ("m",), "rpm": 2, "tpm": 100, "max_concurrent": 1})

    async def admitted(model: str, tokens: int) -> Ticket:
        ticket = Ticket(tenants.identify([secret.encode()]), generating=True)  # the router's door takes nothing
        await tenants.admit(ticket, model, tokens)
        return ticket

    async def go():
        for _ in range(3):
            with pytest.raises(Refused) as e:
                await admitted("other", 1)
            assert e.value.status == 403
        first = await admitted("m", 60)
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        with pytest.raises(Refused) as e:
            await admitted("m", 1)
        assert e.value.kind == "concurrency"
        await tenants.settle(first, 200)  # it used nothing: its 60 tokens come back
        second = await admitted("m", 100)  # the minute's whole 100 fit again
        await tenants.settle(second, 200)
        with pytest.raises(Refused) as e:
            await admitted("m", 1)
        assert e.value.kind == "requests"  # two admitted; the 403s and the refused one did not count
        assert await limiter.in_flight(key) == 0

    run(go())


def test_reset_durations_read_like_openais():
    assert [duration(s) for s in (0.02, 1, 59.2, 60, 361)] == ["20ms", "1s", "1m0s", "1m0s", "6m1s"]


def test_a_restart_does_not_renew_a_daily_allowance(tmp_path):
    clock = Clock()

    def started() -> tuple[Tenants, str]:
        ring = KeyRing(KeyStore.in_dir(tmp_path))
        return Tenants(ring, Limiter(clock=clock), clock=clock), ring

    async def use(tenants, secret, tokens):
        ticket = Ticket(tenants.identify([secret.encode()]))
        await tenants.admit(ticket, "m", tokens)
        ticket.meters.append(lambda: (tokens, 0, 0))
        await tenants.settle(ticket, 200)

    tenants, ring = started()
    _, secret = ring.add("k", {"daily_tokens": 100})
    run(use(tenants, secret, 70))
    tenants.close()
    tenants, _ = started()  # a new process: counters in memory start empty

    async def after_restart():
        with pytest.raises(Refused) as e:
            await use(tenants, secret, 40)
        assert e.value.kind == "daily_tokens"
        await use(tenants, secret, 30)

    run(after_restart())
    tenants.close()


def test_a_ledger_in_memory_is_read_and_flushed_without_a_thread(monkeypatch):
    """No store: a key's first request of the day and the ledger's flush stay on the event loop."""
    import inferd.tenants.gate as gate

    def no_thread(*args, **kwargs):
        raise AssertionError("a worker thread was asked for")

    monkeypatch.setattr(gate.asyncio, "to_thread", no_thread)
    monkeypatch.setattr(gate, "FLUSH_SECONDS", 0.0)
    clock = Clock()
    ring = KeyRing()
    _, secret = ring.add("k", {"daily_tokens": 100})
    tenants = Tenants(ring, Limiter(clock=clock), clock=clock)

    async def go():
        ticket = Ticket(tenants.identify([secret.encode()]))
        await tenants.admit(ticket, "m", 10)  # the day's earlier usage is read: from memory
        ticket.meters.append(lambda: (10, 0, 0))
        await tenants.settle(ticket, 200)
        await asyncio.sleep(0.01)  # the flush is due at once
        assert tenants._flushing is not None and tenants._flushing.done() and tenants._flushing.exception() is None

    run(go())
    assert [(r.key, r.prompt_tokens) for r in tenants.ledger.usage()] == [("k", 10)]


def test_a_card_shows_the_last_64_kib_of_output_in_bytes():
    from inferd.serving.cards import OUTPUT_TAIL, RequestCard

    card = RequestCard("r", "t", None, "m", "/v1/chat/completions")
    card.add_output("a" * 10 + "é" * 40_000)
    card.add_output("z" * 10)
    shown = card.public(output=True)["output"]
    assert card.state == "running" and shown.endswith("é" * 100 + "z" * 10)
    assert OUTPUT_TAIL - 1 <= len(shown.encode()) <= OUTPUT_TAIL


def test_keys_edited_by_another_process_take_effect_without_a_restart(tmp_path):
    ring = KeyRing(KeyStore.in_dir(tmp_path), bootstrap=["boot"])
    kept, _ = ring.add("kept", {"rpm": 1})
    told = []
    ring.on_change = lambda name, key: told.append((name, key is not None))
    watch = StoreWatch(ring, interval=0.05)
    offline = KeyRing(KeyStore.in_dir(tmp_path))  # `inferd keys --data-dir` beside the server
    try:
        _, secret = offline.add("added", {"scopes": ("m",)})
        assert wait_for(lambda: ring.find(secret.encode()) is not None, timeout=1)
        assert ring.get("added").scopes == ("m",) and told == [("added", True)]
        _, rotated = offline.rotate("added")
        assert wait_for(lambda: ring.find(secret.encode()) is None, timeout=1)  # the old secret dies
        assert ring.find(rotated.encode()).name == "added"
        offline.update("kept", {"disabled": True})
        assert wait_for(lambda: ring.get("kept").disabled, timeout=1)
        offline.remove("added")
        assert wait_for(lambda: ring.find(rotated.encode()) is None, timeout=1)
        ring.used(kept, 5.0)
        ring.store.touch(ring.take_last_used())  # its own writes are not read back as changes
        ring.add("here", {})
        told.clear()
        watch.check()
        assert told == [] and ring.find(b"boot") is not None and len(ring) == 3
    finally:
        watch.stop()
