"""The model store on disk: names, manifests, blobs shared by content, the
bundled model recorded without a copy, import by hard link or copy, copy,
remove and verify."""

from __future__ import annotations

import json
import os

import pytest

from hub_server import small_gguf
from inferd.model_store import (BadModelName, IntegrityError, ModelName, ModelNotStored, ModelStore, Refused,
                                StoreError)
from inferd.model_store.bundled import BUNDLED
from inferd.model_store.importing import import_model
from inferd.models.default import default_model_path
from inferd.models.paths import ModelNotFoundError, resolve_model_path


@pytest.fixture
def store(tmp_path):
    return ModelStore(tmp_path / "data" / "models")


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "src" / "Tiny-Q4_K_M.gguf"
    path.parent.mkdir()
    small_gguf(path)
    return path


@pytest.mark.parametrize("text, name, tag", [
    ("tiny", "tiny", "latest"), ("tiny:v2", "tiny", "v2"), ("acme/Tiny-GGUF:Q4_K_M", "acme/Tiny-GGUF", "Q4_K_M"),
    ("hf.co/acme/tiny:q8_0", "acme/tiny", "q8_0"), (" tiny ", "tiny", "latest"),
])
def test_names_parse(text, name, tag):
    assert ModelName.parse(text) == ModelName(name, tag)


@pytest.mark.parametrize("text", ["", ":x", "a/b/c", "../x", "x:", "x:a b", "x/..", "-x", "x y"])
def test_bad_names_say_what_a_name_is(text):
    with pytest.raises(BadModelName, match=r"name\[:tag\].*owner/repo\[:QUANT\]"):
        ModelName.parse(text)


def test_the_bundled_model_is_stored_from_the_first_use_without_a_copy(store, gguf):
    [manifest] = store.models()
    assert manifest.model_name == BUNDLED and manifest.format == "gguf"
    assert (manifest.architecture, manifest.quantization, manifest.license) == ("gemma3", "Q4_K_M", "gemma")
    assert manifest.parameter_count > 200_000_000 and manifest.context_length == 32768
    assert store.resolve("gemma-3-270m") == store.resolve("gemma-3-270m:latest")
    assert str(store.resolve("gemma-3-270m")) == default_model_path()
    assert store.blobs.all() == []  # recorded where the package put it, not copied
    with pytest.raises(Refused, match="bundled model"):
        store.remove("gemma-3-270m")
    import_model(store, gguf, name="tiny")
    with pytest.raises(Refused, match="names the bundled model"):
        store.copy("tiny", "gemma-3-270m")
    with pytest.raises(Refused, match="names the bundled model"):
        import_model(store, gguf, "gemma-3-270m")
    assert store.get("gemma-3-270m").source["type"] == "bundled"


def test_import_hard_links_a_gguf_and_describes_it(store, gguf):
    manifest = import_model(store, gguf)
    assert manifest.model_name == ModelName("Tiny-Q4_K_M")
    [file] = manifest.files
    blob = store.blobs.path(file.sha256)
    assert os.path.samefile(blob, gguf)  # a hard link: no bytes copied
    assert (manifest.architecture, manifest.quantization, manifest.context_length) == ("llama", "Q4_K_M", 2048)
    assert manifest.parameter_count == 64 * 1024 and manifest.chat_template and manifest.license == "apache-2.0"
    assert manifest.capabilities == ["completion", "chat", "tools"]
    assert manifest.source == {"type": "import", "path": str(gguf), "copied": False}
    path = store.resolve("Tiny-Q4_K_M")
    assert path.name == gguf.name and path.read_bytes() == gguf.read_bytes()
    assert resolve_model_path("Tiny-Q4_K_M", store.root.parent) == ("Tiny-Q4_K_M", path)


def test_import_copy_and_two_names_share_one_blob(store, gguf):
    first = import_model(store, gguf, name="one", copy=True)
    assert not os.path.samefile(store.blobs.path(first.files[0].sha256), gguf)
    import_model(store, gguf, name="two:q4")
    store.copy("one", "three")
    assert [m.model_name.short for m in store.models()] == ["gemma-3-270m", "one", "three", "two:q4"]
    assert len(store.blobs.all()) == 1  # shared bytes, one blob
    store.remove("one"), store.remove("two:q4")
    assert len(store.blobs.all()) == 1  # "three" still names it
    store.remove("three")
    assert store.blobs.all() == [] and [m.model_name.short for m in store.models()] == ["gemma-3-270m"]
    with pytest.raises(ModelNotStored, match=r"'three' is not in the store \(stored: gemma-3-270m\)"):
        store.remove("three")


def test_a_folder_imports_only_the_files_a_model_needs(store, tiny_model_dir, tmp_path):
    folder = tmp_path / "tiny-folder"
    folder.mkdir()
    for f in tiny_model_dir.iterdir():
        os.link(f, folder / f.name)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n")
    (folder / "notes.txt").write_text("not part of the model")
    manifest = import_model(store, folder)
    names = {f.name for f in manifest.files}
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert "notes.txt" not in names and "README.md" not in names
    assert manifest.format == "safetensors" and manifest.architecture == "gemma3_text"
    assert manifest.license == "mit" and manifest.context_length == 512 and manifest.parameter_count > 0
    view = store.resolve("tiny-folder")
    assert view.is_dir() and (view / "config.json").read_bytes() == (folder / "config.json").read_bytes()


def test_verify_finds_changed_bytes(store, gguf):
    import_model(store, gguf, name="tiny", copy=True)
    assert store.verify("tiny") == []
    manifest = store.require("tiny")
    blob = store.blobs.path(manifest.files[0].sha256)
    blob.write_bytes(b"x" + blob.read_bytes()[1:])
    assert store.verify("tiny") == manifest.files
    blob.unlink()
    with pytest.raises(IntegrityError, match="missing from the store"):
        store.resolve("tiny")


def test_an_unreadable_manifest_is_skipped_not_fatal(store, gguf, caplog):
    import_model(store, gguf, name="tiny")
    (store.manifests / "broken%3Alatest.json").write_text("{not json")
    assert [m.model_name.short for m in store.models()] == ["gemma-3-270m", "tiny"]
    assert "unreadable manifest" in caplog.text


def test_import_refuses_what_is_not_a_model(store, tmp_path):
    (tmp_path / "x.bin").write_bytes(b"0")
    with pytest.raises(StoreError, match="not a .gguf file"):
        import_model(store, tmp_path / "x.bin")
    with pytest.raises(StoreError, match="not a Hugging Face model folder"):
        import_model(store, tmp_path)


def test_a_name_that_is_neither_a_path_nor_stored_lists_what_is(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"'acme/nothing' is neither a local path .* nor in the store "
                                                 r"\(stored: gemma-3-270m\); `inferd pull` fetches"):
        resolve_model_path("acme/nothing", tmp_path)


def test_manifests_round_trip_as_json(store, gguf):
    manifest = import_model(store, gguf, name="tiny")
    text = (store.manifests / "tiny%3Alatest.json").read_text()
    assert json.loads(text)["files"][0]["sha256"] == manifest.files[0].sha256
    assert store.get("tiny") == manifest


def test_a_data_dir_that_is_a_file_is_a_store_error_naming_it(tmp_path):
    (tmp_path / "data").write_text("")
    with pytest.raises(StoreError, match=f"{tmp_path / 'data'} is a file, not a folder; pick another --data-dir"):
        ModelStore(tmp_path / "data" / "models").models()
    with pytest.raises(ModelNotFoundError, match="is a file, not a folder"):
        resolve_model_path("tiny", tmp_path / "data")


def test_removing_a_model_sweeps_partial_downloads_abandoned_for_a_week(store, gguf):
    import_model(store, gguf, name="tiny")
    store.partial.mkdir(parents=True)
    old, recent = store.partial / "a.partial", store.partial / "b.partial"
    old.write_bytes(b"x"), recent.write_bytes(b"y")
    week_ago = old.stat().st_mtime - 7 * 24 * 3600 - 1
    os.utime(old, (week_ago, week_ago))
    store.remove("tiny")
    assert sorted(p.name for p in store.partial.iterdir()) == ["b.partial"]


def test_a_hub_repository_answers_to_its_own_name_when_one_alone_has_it(store, gguf, tmp_path):
    import_model(store, gguf, name="sentence-transformers/all-MiniLM-L6-v2")
    import_model(store, gguf, name="acme/Tiny:q4")
    import_model(store, gguf, name="one/dup"), import_model(store, gguf, name="two/dup")
    assert store.get("all-minilm-l6-v2").name == "sentence-transformers/all-MiniLM-L6-v2"
    assert store.get("tiny:q4").model_name == ModelName("acme/Tiny", "q4") and store.get("tiny") is None
    assert store.get("dup") is None  # two repositories of that name: neither
    assert resolve_model_path("all-MiniLM-L6-v2", tmp_path / "data")[1] == store.resolve("all-minilm-l6-v2")
    with pytest.raises(ModelNotStored):  # removing takes the name itself
        store.remove("all-minilm-l6-v2")
    store.remove("sentence-transformers/all-MiniLM-L6-v2")
    assert store.get("all-minilm-l6-v2") is None
