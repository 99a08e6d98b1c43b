"""Shared fixtures: tiny models written once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tiny_models import write_tiny_model

# Property tests draw the same examples every run, so CI is reproducible;
# HYPOTHESIS_PROFILE=explore draws fresh ones when hunting for bugs.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-gemma3"))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-llama"), arch="llama")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    """A real etcd on free ports (.host, .port, .address = etcd://HOST:PORT); skips when none can be had."""
    from etcd import EtcdServer, etcd_or_skip

    server = EtcdServer(tmp_path_factory.mktemp("etcd"), binary=etcd_or_skip())
    server.start()
    yield server
    server.stop()
