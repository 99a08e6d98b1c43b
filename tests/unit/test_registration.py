"""Worker registration in etcd: options and names, then against a real etcd
the key and its lease, re-registration after a lost lease, deregistration,
and an unreachable etcd that is retried without stopping anything."""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys

import pytest

from inferd.cli_options import add_options, build
from inferd.config import ServeConfig
from inferd.discovery import registration
from inferd.discovery.record import DEFAULT_PREFIX, WorkerRecord, worker_key
from inferd.discovery.registration import Registration, check_options, default_advertise_url, worker_id_for
from polling import async_wait_for

aetcd = pytest.importorskip("aetcd", reason="the etcd extra is not installed (pip install 'inferd[etcd]')")

RECORD = WorkerRecord(id="10.0.0.5-8080", url="http://10.0.0.5:8080", model="tiny", parallel=2, block_size=16,
                      capabilities=["kv-events"])


# -- options and names -------------------------------------------------------------


def test_the_register_options_are_serve_flags():
    parser = argparse.ArgumentParser()
    add_options(parser, ServeConfig)
    config = build(ServeConfig, parser.parse_args([
        "--register", "etcd://10.0.0.1:2379", "--register-prefix", "/fleet/", "--register-ttl", "2.5",
        "--advertise-url", "http://w1:8080",
    ]))
    assert (config.register, config.register_prefix, config.register_ttl, config.advertise_url) == (
        "etcd://10.0.0.1:2379", "/fleet/", 2.5, "http://w1:8080")
    defaults = build(ServeConfig, parser.parse_args([]))
    assert (defaults.register, defaults.register_prefix, defaults.register_ttl, defaults.advertise_url) == (
        None, DEFAULT_PREFIX, 10.0, None)


@pytest.mark.parametrize("url, worker_id", [
    ("http://10.0.0.5:8080", "10.0.0.5-8080"),
    ("http://[::1]:8080/", "__1-8080"),
    ("https://gpu-3.example/inferd/", "gpu-3.example-443_inferd"),
    ("http://w1", "w1-80"),
])
def test_a_worker_id_is_its_url_in_key_safe_characters(url, worker_id):
    assert worker_id_for(url) == worker_id


def test_the_default_advertised_url_is_the_bound_socket():
    assert default_advertise_url(("127.0.0.1", 8080)) == "http://127.0.0.1:8080"
    assert default_advertise_url(("::1", 8080, 0, 0)) == "http://[::1]:8080"
    assert default_advertise_url(("0.0.0.0", 9000)) == f"http://{socket.gethostname()}:9000"


def test_bad_register_options_stop_the_server_before_it_starts():
    with pytest.raises(SystemExit, match="--register: etcd address 'ftp://x:1': expected etcd://HOST:PORT"):
        check_options("ftp://x:1", 10.0)
    with pytest.raises(SystemExit, match="--register-ttl must be positive, got 0"):
        check_options("etcd://127.0.0.1:2379", 0)
    check_options("etcd://127.0.0.1:2379", 10.0)


def test_without_the_etcd_client_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "aetcd", None)  # makes `import aetcd` fail
    with pytest.raises(SystemExit, match=r"pip install 'inferd\[etcd\]'"):
        check_options("etcd://127.0.0.1:2379", 10.0)


# -- against a real etcd --------------------------------------------------------------


def test_the_key_holds_the_record_under_a_lease_and_stop_deletes_both(etcd_server):
    async def go():
        reg = Registration(etcd_server.address, RECORD, "/unit-stop/", ttl=2)
        assert reg.key == worker_key("/unit-stop/", RECORD.id) == b"/unit-stop/10.0.0.5-8080"
        async with aetcd.Client(etcd_server.host, etcd_server.port, timeout=5) as etcd:
            reg.start()
            kv = await async_wait_for(lambda: etcd.get(reg.key), timeout=10.0)
            assert kv is not None and WorkerRecord.from_json(kv.value) == RECORD
            assert (await etcd.get_lease_info(kv.lease, keys=True)).keys == [reg.key]
            await reg.stop()
            assert await etcd.get(reg.key) is None
            assert (await etcd.get_lease_info(kv.lease, keys=False)).TTL == -1  # revoked, not left to expire
            reg.start()  # after stop: nothing
            assert reg._task is None and not reg.registered

    asyncio.run(go())


def test_a_lost_lease_is_replaced_and_the_key_put_again(etcd_server, caplog):
    async def go():
        reg = Registration(etcd_server.address, RECORD, "/unit-lost/", ttl=2)
        async with aetcd.Client(etcd_server.host, etcd_server.port, timeout=5) as etcd:
            reg.start()
            try:
                first = await async_wait_for(lambda: etcd.get(reg.key), timeout=10.0)
                await etcd.revoke_lease(first.lease)  # as if etcd had lost it
                assert await etcd.get(reg.key) is None

                async def back():
                    kv = await etcd.get(reg.key)
                    return kv if kv is not None and kv.lease != first.lease else None

                again = await async_wait_for(back, timeout=10.0)
                assert again is not None and WorkerRecord.from_json(again.value) == RECORD
            finally:
                await reg.stop()

    with caplog.at_level(logging.INFO, logger=registration.__name__):
        asyncio.run(go())
    assert "the etcd lease of /unit-lost/10.0.0.5-8080 was lost; registering again" in caplog.text


def test_an_unreachable_etcd_is_logged_once_and_retried_until_it_answers(tmp_path, caplog):
    from etcd import EtcdServer, etcd_or_skip, free_port

    etcd_server = EtcdServer(tmp_path, binary=etcd_or_skip(), port=free_port())

    async def go():
        reg = Registration(etcd_server.address, RECORD, "/unit-retry/", ttl=2)
        tries = 0
        grant = reg._client.lease

        async def counted_grant(ttl):  # each try to register starts with a lease
            nonlocal tries
            tries += 1
            return await grant(ttl)

        reg._client.lease = counted_grant
        reg.start()
        try:
            assert await async_wait_for(lambda: reg._failing, timeout=10.0)
            assert await async_wait_for(lambda: tries >= 3, timeout=10.0), f"{tries} tries"  # two more after the first
            assert not reg.registered and not reg._task.done()
            await asyncio.to_thread(etcd_server.start)
            assert await async_wait_for(lambda: reg.registered, timeout=15.0)
        finally:
            await reg.stop()

    try:
        with caplog.at_level(logging.INFO, logger=registration.__name__):
            asyncio.run(go())
    finally:
        etcd_server.stop()
    unreachable = [r for r in caplog.records if "is unreachable" in r.getMessage()]
    assert len(unreachable) == 1 and unreachable[0].levelno == logging.WARNING
    assert f"etcd at {etcd_server.address} answers again" in caplog.text
