"""Shared fixtures: tiny models written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_models import write_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-gemma3"))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-llama"), arch="llama")
