"""One `inferd serve` with the bundled Gemma 3 270M as its own model and two
tiny Llamas only in its store (one also named with `--model tiny-c --alias
cee`), loaded on demand under a --memory-budget that holds one of them
(--max-loaded-models 0: the budget alone decides), driven
by the OpenAI SDK: every request to each of the three gets that model's own
output, the two stored models evict each other (counted in /metrics), and a
model with a request in flight is not evicted under it."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server import ServerProcess
from tiny_models import write_tiny_model

openai = pytest.importorskip("openai")

PROMPT = [{"role": "user", "content": "Say something."}]
STORED = ("tiny-b", "tiny-c")


@pytest.fixture(scope="module")
def budget_server(server_logs, tmp_path_factory):
    from inferd.model_store import ModelStore
    from inferd.model_store.importing import import_model

    data = tmp_path_factory.mktemp("budget-models")
    store = ModelStore(data / "models")
    sizes = [import_model(store, write_tiny_model(tmp_path_factory.mktemp(name), arch="llama", seed=seed),
                          name=name).size for seed, name in enumerate(STORED, start=1)]
    # One fits (a load needs its file's size), two do not: one loaded holds its weights and KV cache beside it.
    budget = int(max(sizes) * 1.2)
    server = ServerProcess(None, port=0, parallel=2, ctx_size=512, metrics=True, log_path=server_logs / "budget.log",
                           extra_args=["--data-dir", str(data), "--memory-budget", str(budget),
                                       "--max-loaded-models", "0", "--model", "gemma-3-270m", "--model", "tiny-c",
                                       "--alias", "cee"])
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(budget_server):
    with budget_server.openai() as c:
        yield c


def answer(client, model: str) -> tuple[str, str]:
    r = client.chat.completions.create(model=model, messages=PROMPT, max_tokens=6, temperature=0)
    return r.model, r.choices[0].message.content


def metric(server, name: str, labels: str = "") -> float:
    text = httpx.get(f"{server.base_url}/metrics").text
    return float(re.search(rf"^{name}{re.escape(labels)} (\S+)$", text, re.M)[1])


def evictions(server) -> float:
    return metric(server, "inferd_model_unloads_total", '{reason="evicted"}')


def test_the_bundled_model_and_two_stored_ones_each_answer_with_their_own_output(budget_server, client):
    names = [budget_server.model_name, *STORED]
    alone = {name: answer(client, name) for name in names}
    assert [model for model, _ in alone.values()] == names
    assert len({text for _, text in alone.values()}) == 3  # three different weights, three answers
    order = names * 2
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda name: answer(client, name), order))
    assert together == [alone[name] for name in order]
    # `--model tiny-c --alias cee`: the alias is the model's id; its stored name still answers.
    assert answer(client, "cee") == ("cee", alone["tiny-c"][1])
    card = client.models.retrieve("tiny-c")
    assert (card.id, card.aliases) == ("cee", ["tiny-c"])


def test_under_a_budget_for_one_the_stored_models_alternate_each_evicting_the_other(budget_server, client):
    first = answer(client, "tiny-b")
    before, loads = evictions(budget_server), metric(budget_server, "inferd_model_loads_total")
    for _ in range(2):
        assert answer(client, "tiny-c")[0] == "tiny-c"
        assert answer(client, "tiny-b") == first
    assert evictions(budget_server) == before + 4
    assert metric(budget_server, "inferd_model_loads_total") == loads + 4
    assert metric(budget_server, "inferd_models_loaded") == 1  # the server's own is not one loaded on demand


def test_a_model_with_a_request_in_flight_is_not_evicted_under_it(budget_server, client):
    """tiny-c's load needs tiny-b's room while tiny-b streams: it waits, and both answer in full."""
    expected = client.chat.completions.create(model="tiny-b", messages=PROMPT, max_tokens=200, temperature=0)
    alone_c = answer(client, "tiny-c")
    stream = client.chat.completions.create(model="tiny-b", messages=PROMPT, max_tokens=200, temperature=0,
                                            stream=True)
    chunks = iter(stream)
    text = [next(chunks).choices[0].delta.content or ""]  # tiny-b is streaming now
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(answer, client, "tiny-c")
        text += [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert other.result(timeout=120) == alone_c
    assert "".join(text) == expected.choices[0].message.content
