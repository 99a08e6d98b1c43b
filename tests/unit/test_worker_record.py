"""The etcd record a worker publishes, and the etcd addresses both sides accept."""

from __future__ import annotations

import pytest

from inferd.discovery.record import DEFAULT_PREFIX, WorkerRecord, parse_etcd_address, worker_key


def test_record_round_trips_and_ignores_unknown_fields():
    record = WorkerRecord("w1", "http://10.0.0.5:8080", model="gemma", parallel=4, block_size=16,
                          capabilities=["kv-events"])
    assert WorkerRecord.from_json(record.to_json()) == record
    assert WorkerRecord.from_json(b'{"id":"w2","url":"http://h:1","future":true}') == WorkerRecord("w2", "http://h:1")


@pytest.mark.parametrize("raw", [b"[]", b'{"url":"http://h:1"}', b'{"id":"w","url":5}'])
def test_malformed_records_are_refused(raw):
    with pytest.raises(ValueError, match="not a worker record"):
        WorkerRecord.from_json(raw)


def test_worker_key():
    assert worker_key(DEFAULT_PREFIX, "w1") == b"/inferd/workers/w1"
    assert worker_key("/fleet", "w1") == b"/fleet/w1"


@pytest.mark.parametrize(("address", "expected"), [
    ("etcd://10.0.0.2:2379", ("10.0.0.2", 2379)),
    ("http://etcd.local:12379", ("etcd.local", 12379)),
    ("127.0.0.1:4001", ("127.0.0.1", 4001)),
    ("etcd://etcd.local", ("etcd.local", 2379)),
])
def test_etcd_addresses(address, expected):
    assert parse_etcd_address(address) == expected


@pytest.mark.parametrize("address", ["etcd://host:0", "grpc://host:2379", "etcd://:2379", "etcd://host:99999", "host:port"])
def test_bad_etcd_addresses_are_refused(address):
    with pytest.raises(ValueError, match="expected etcd://HOST:PORT"):
        parse_etcd_address(address)
