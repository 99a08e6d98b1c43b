"""`inferd pull` against a hub-shaped server over real HTTP, with the real
huggingface_hub client: files chosen by quantization, verified against the
hub's hashes before any manifest is written, resumed where a cut download
stopped, one download shared by two pulls, and the disk checked first."""

from __future__ import annotations

import threading

import pytest

from hub_server import HubServer, small_gguf
from inferd.model_store import IntegrityError, ModelStore, NotEnoughSpace
from inferd.model_store import pull as pull_module
from inferd.model_store.hub import HubError, RepoNotFound
from inferd.model_store.hub_files import QuantizationError
from inferd.model_store.pull import pull

GGUF_REPO, FOLDER_REPO = "acme/Tiny-GGUF", "acme/tiny"
Q4, Q8, Q6 = "Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "Tiny-Q6_K.gguf"
MB = 2**20


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("hub-files")
    with HubServer() as hub:
        hub.add_repo(GGUF_REPO, {Q4: small_gguf(folder / Q4), Q8: small_gguf(folder / Q8, file_type=7, rows=8),
                                 "README.md": b"# Tiny\n"}, license="apache-2.0")
        # huggingface_hub writes what it receives in 10 MiB pieces, so a resumable cut needs a larger file.
        hub.add_repo("acme/Big-GGUF", {Q6: small_gguf(folder / Q6, file_type=18, rows=24 * 256)})
        folder_files = {p.name: p.read_bytes() for p in tiny_model_dir.iterdir()}
        hub.add_repo(FOLDER_REPO, {**folder_files, "README.md": b"# tiny", "onnx/model.onnx": b"\0" * 5000})
        yield hub


@pytest.fixture
def store(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.reset()
    hub.pace = 0.0
    return ModelStore(tmp_path / "models")


def test_pull_a_quantization_verified_with_progress(store, hub):
    events = []
    manifest = pull(store, f"{GGUF_REPO}:Q4_K_M", events.append)
    size = len(hub.repos[GGUF_REPO][Q4])
    assert hub.sent == {Q4: size}  # only the file asked for
    assert manifest.model_name.full == f"{GGUF_REPO}:Q4_K_M" and manifest.format == "gguf"
    assert manifest.source == {"type": "huggingface", "endpoint": hub.url, "repo": GGUF_REPO,
                               "revision": "0123456789abcdef0123456789abcdef01234567", "files": [Q4]}
    assert (manifest.quantization, manifest.architecture, manifest.license) == ("Q4_K_M", "llama", "apache-2.0")
    assert store.resolve(f"{GGUF_REPO}:Q4_K_M").read_bytes() == hub.repos[GGUF_REPO][Q4]
    statuses = [e.status for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest",
                                                                   "success"]
    downloading = [e for e in events if e.status == f"pulling {Q4}"]
    assert downloading[-1].completed == downloading[-1].total == size
    assert downloading[-1].digest == f"sha256:{manifest.files[0].sha256}"
    again = pull(store, f"{GGUF_REPO}:Q4_K_M")  # stored already: nothing fetched
    assert hub.sent == {Q4: size} and again.files == manifest.files


def test_pull_a_safetensors_folder_takes_only_the_model_files(store, hub, tiny_model_dir):
    manifest = pull(store, FOLDER_REPO)
    names = {f.name for f in manifest.files}
    assert names == {p.name for p in tiny_model_dir.iterdir()}  # no README, no onnx/
    assert manifest.format == "safetensors" and manifest.architecture == "gemma3_text"
    view = store.resolve(FOLDER_REPO)
    assert {p.name for p in view.iterdir()} == names
    assert (view / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    sent = dict(hub.sent)
    assert pull(store, FOLDER_REPO).files == manifest.files
    assert hub.sent == sent  # up to date: small files are matched by their git blob id, large ones by sha256


def test_a_cut_download_resumes_where_it_stopped(store, hub):
    data = hub.repos["acme/Big-GGUF"][Q6]
    hub.cut[Q6] = 15 * MB  # the connection drops; the retry huggingface_hub makes finds the hub down
    with pytest.raises(HubError, match="pull again to continue"):
        pull(store, "acme/Big-GGUF:Q6_K")
    assert store.get("acme/Big-GGUF:Q6_K") is None
    [partial] = store.partial.glob("*.partial")
    kept = partial.stat().st_size
    assert 0 < kept <= 15 * MB  # what arrived before the cut, in huggingface_hub's 10 MiB pieces
    hub.reset()
    manifest = pull(store, "acme/Big-GGUF:Q6_K")
    assert hub.ranges == [f"{Q6} bytes={kept}-"]
    assert hub.sent[Q6] == len(data) - kept < len(data)  # only the rest
    assert store.resolve(manifest.model_name).read_bytes() == data


def test_bytes_that_do_not_match_the_hubs_sha256_leave_no_manifest(store, hub):
    hub.corrupt.add(Q4)
    with pytest.raises(IntegrityError, match=f"{Q4} from {GGUF_REPO} does not match the hub's sha256"):
        pull(store, f"{GGUF_REPO}:Q4_K_M")
    assert store.get(f"{GGUF_REPO}:Q4_K_M") is None
    assert store.blobs.all() == [] and list(store.partial.glob("*")) == []  # nothing kept to resume from


def test_a_missing_quantization_lists_those_present(store, hub):
    with pytest.raises(QuantizationError) as error:
        pull(store, f"{GGUF_REPO}:Q5_K_M")
    assert str(error.value) == (f"{GGUF_REPO} has no GGUF file of quantization Q5_K_M; quantizations there: "
                                f"Q4_K_M, Q8_0 (files: {Q4}, {Q8})")
    with pytest.raises(QuantizationError, match="several GGUF files; pick one by quantization"):
        pull(store, GGUF_REPO)
    with pytest.raises(RepoNotFound, match="acme/none is not a model repository"):
        pull(store, "acme/none")
    assert hub.sent == {}


def test_two_pulls_of_one_model_share_one_download(store, hub):
    hub.pace = 0.01
    results, errors = [], []

    def one():
        try:
            results.append(pull(ModelStore(store.root), f"{GGUF_REPO}:Q4_K_M"))
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(results) == 2
    assert hub.sent == {Q4: len(hub.repos[GGUF_REPO][Q4])}


def test_the_disk_is_checked_before_any_byte_is_fetched(store, hub, monkeypatch):
    monkeypatch.setattr(pull_module, "free_bytes", lambda folder: 1000)
    with pytest.raises(NotEnoughSpace, match=r"this needs 0.3 MB and .* has 0.0 MB free"):
        pull(store, f"{GGUF_REPO}:Q4_K_M")
    assert hub.sent == {}


def test_verify_rehashes_and_fetches_damaged_files_again(store, hub):
    manifest = pull(store, f"{GGUF_REPO}:Q8_0")
    blob = store.blobs.path(manifest.files[0].sha256)
    blob.write_bytes(b"\0" + blob.read_bytes()[1:])
    assert store.verify(manifest.model_name) == manifest.files
    pull(store, f"{GGUF_REPO}:Q8_0", verify=True)
    assert store.verify(manifest.model_name) == []
    assert hub.sent[Q8] == 2 * len(hub.repos[GGUF_REPO][Q8])


def test_a_file_in_huggingface_hubs_cache_is_taken_from_there(store, hub, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    huggingface_hub.hf_hub_download(GGUF_REPO, Q8, cache_dir=cache, endpoint=hub.url)  # another tool fetched it
    size = len(hub.repos[GGUF_REPO][Q8])
    assert hub.sent == {Q8: size}
    manifest = pull(store, f"{GGUF_REPO}:Q8_0")
    assert hub.sent == {Q8: size}  # not fetched again
    assert store.resolve(manifest.model_name).read_bytes() == hub.repos[GGUF_REPO][Q8]


def test_hf_token_is_sent_with_every_request(store, hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    pull(store, f"{GGUF_REPO}:Q8_0")
    assert len(hub.authorizations) >= 2 and set(hub.authorizations) == {"Bearer hf_secret"}
