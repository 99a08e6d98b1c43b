"""Servers shared by the end-to-end tests: started once per session, stopped
with SIGTERM at the end. The bundled-model server starts only when a test asks
for it."""

from __future__ import annotations

import pytest

from server import ALIAS, TINY_CTX, TINY_PARALLEL, ServerProcess


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory):
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir, server_logs):
    """The tiny random-weight Gemma 3 model: --parallel 4 --ctx-size 256 --alias gpt-4o-mini, no API key."""
    server = ServerProcess(
        tiny_model_dir, port=0, parallel=TINY_PARALLEL, ctx_size=TINY_CTX, alias=[ALIAS],
        log_path=server_logs / "tiny.log", extra_args=["--strict-model-names"],  # unknown names are 404s here
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def bundled_server(server_logs):
    """The bundled Gemma 3 270M: a real tokenizer, real weights, a context long enough for long generations."""
    server = ServerProcess(None, port=0, parallel=2, ctx_size=4096, log_path=server_logs / "bundled.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def embedding_server(tiny_model_dir, server_logs):
    """The tiny chat model with --pooling mean, and the bundled all-MiniLM-L6-v2 beside it."""
    server = ServerProcess(tiny_model_dir, port=0, parallel=2, ctx_size=TINY_CTX, log_path=server_logs / "embed.log",
                           extra_args=["--embedding-model", "all-minilm-l6-v2", "--pooling", "mean"])
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(tiny_server):
    with tiny_server.openai() as c:
        yield c


@pytest.fixture(scope="session")
def http(tiny_server):
    with tiny_server.http() as c:
        yield c



@pytest.fixture(scope="session")
def hub(tmp_path_factory, tiny_model_dir):
    """A hub-shaped server (tests/hub_server.py): acme/Tiny-GGUF (Q4_K_M and Q8_0 files), acme/tiny (a folder)
    and acme/Tiny-Embed (a sentence-transformers folder)."""
    from hub_server import HubServer, small_gguf
    from tiny_encoders import write_tiny_encoder

    folder = tmp_path_factory.mktemp("hub-files")
    encoder = write_tiny_encoder(folder / "embed")
    with HubServer() as hub:
        hub.add_repo("acme/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": small_gguf(folder / "q4.gguf"),
                                        "Tiny-Q8_0.gguf": small_gguf(folder / "q8.gguf", file_type=7, rows=8)},
                     license="apache-2.0")
        hub.add_repo("acme/tiny", {p.name: p.read_bytes() for p in tiny_model_dir.iterdir()})
        hub.add_repo("acme/Tiny-Embed", {p.relative_to(encoder).as_posix(): p.read_bytes()
                                         for p in encoder.rglob("*") if p.is_file()})
        yield hub


@pytest.fixture(scope="session")
def store_server(tiny_model_dir, server_logs, hub, tmp_path_factory):
    """The tiny model imported into a model store of the server's own as "tiny-stored" and
    served by that name (`--model tiny-stored`); pulls go to `hub`."""
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model

    data = tmp_path_factory.mktemp("store-data")
    import_model(ModelStore(data / "models"), tiny_model_dir, name="tiny-stored")
    server = ServerProcess("tiny-stored", port=0, parallel=2, ctx_size=TINY_CTX, log_path=server_logs / "store.log",
                           extra_args=["--data-dir", str(data)])
    server.env = {"HF_ENDPOINT": hub.url}
    server.start()
    yield server
    server.stop()


TENANT_ADMIN = "tenant-admin-secret"


@pytest.fixture(scope="session")
def tenant_server(tiny_model_dir, server_logs):
    """The tiny model with an admin key (API keys, limits, usage and request cards on), its own data dir."""
    server = ServerProcess(tiny_model_dir, port=0, parallel=TINY_PARALLEL, ctx_size=512, api_key=[TENANT_ADMIN], alias=["tiny"],
                           log_path=server_logs / "tenants.log", extra_args=["--cors-origin", "*"])
    server.start()
    yield server
    server.stop()
