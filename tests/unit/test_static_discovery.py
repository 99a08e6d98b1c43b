"""`--worker URL` and `--worker MODEL=URL`."""

from __future__ import annotations

import pytest

from inferd.discovery.record import WorkerRecord
from inferd.discovery.static import parse_worker, parse_workers


@pytest.mark.parametrize("entry, record", [
    ("http://10.0.0.5:8080", WorkerRecord(id="http://10.0.0.5:8080", url="http://10.0.0.5:8080")),
    ("http://10.0.0.5:8080/", WorkerRecord(id="http://10.0.0.5:8080", url="http://10.0.0.5:8080")),
    ("https://gpu-1.internal/inferd", WorkerRecord(id="https://gpu-1.internal/inferd", url="https://gpu-1.internal/inferd")),
    ("llama-3-8b=http://10.0.0.6:8000", WorkerRecord(id="http://10.0.0.6:8000", url="http://10.0.0.6:8000",
                                                     model="llama-3-8b")),
    (" org/model-v2 = http://h:1 ", WorkerRecord(id="http://h:1", url="http://h:1", model="org/model-v2")),
    ("=http://h:1", WorkerRecord(id="http://h:1", url="http://h:1")),
])
def test_entries(entry, record):
    assert parse_worker(entry) == record


@pytest.mark.parametrize("entry, message", [
    ("10.0.0.5:8080", "expected a base URL such as http://10.0.0.5:8080, optionally MODEL=URL"),
    ("m=ftp://h:1", "expected a base URL"),
    ("http://", "expected a base URL"),
    ("http://h:1/?a=b", "a worker's base URL takes no query or fragment"),
])
def test_bad_entries_say_what_is_expected(entry, message):
    with pytest.raises(ValueError, match="--worker") as e:
        parse_worker(entry)
    assert message in str(e.value)


def test_a_worker_given_twice_is_an_error():
    with pytest.raises(ValueError, match=r"--worker http://h:1 is given twice"):
        parse_workers(["http://h:1", "m=http://h:1/"])


def test_order_is_kept():
    assert [r.id for r in parse_workers(["http://b:1", "http://a:1"])] == ["http://b:1", "http://a:1"]
