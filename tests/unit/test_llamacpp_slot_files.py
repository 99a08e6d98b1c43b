"""llama-server's slot actions (POST /slots/{id}?action=save|restore|erase) in
process on the tiny model, and the block pool and file pieces behind them."""

from __future__ import annotations

import asyncio

import pytest
import torch

from inferd.api.llamacpp.slot_actions import checked_filename
from inferd.engine.kv_cache import BlockPool
from inferd.engine.slot_files import SlotCache, SlotFileError, read_file, write_file
from inferd.http.errors import BadRequest
from inferd.models.loader import load_model
from polling import async_wait_for
from served import client, served, small_config

BLOCK = 4
GREEDY = {"temperature": 0, "ignore_eos": True, "n_predict": 6}
PROMPT = "Slot files keep a prefix for later."


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(loaded, folder):
    with served(loaded, small_config(block_size=BLOCK, slot_save_path=str(folder))) as server:
        yield server


def run(app, steps):
    async def main():
        async with client(app) as c:
            return await steps(c)

    return asyncio.run(main())


def action(app, slot, name, body=None):
    return run(app, lambda c: c.post(f"/slots/{slot}?action={name}", json=body))


def complete(app, prompt=PROMPT):
    r = run(app, lambda c: c.post("/completion", json={"prompt": prompt, **GREEDY}))
    assert r.status_code == 200, r.text
    return r.json()


def test_save_erase_restore_gives_the_cache_back(server, folder):
    app = server.app
    first = complete(app)
    prompt_tokens = first["tokens_evaluated"]
    saved = action(app, 0, "save", {"filename": "one.slot"})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    # Prompt and output, less the last sampled token (never computed), in whole blocks.
    n_saved = (prompt_tokens + 6 - 1) // BLOCK * BLOCK
    assert body == {"id_slot": 0, "filename": "one.slot", "n_saved": n_saved,
                    "n_written": (folder / "one.slot").stat().st_size, "timings": {"save_ms": body["timings"]["save_ms"]}}
    assert body["timings"]["save_ms"] > 0

    erased = action(app, 0, "erase")
    assert erased.json() == {"id_slot": 0, "n_erased": n_saved}
    cold = complete(app)
    assert cold["tokens_cached"] == 0  # erase took the prefix out of the cache
    assert action(app, 0, "erase").json()["n_erased"] == n_saved  # the cold run cached it again

    restored = action(app, 1, "restore", {"filename": "one.slot"})
    assert restored.status_code == 200, restored.text
    assert restored.json() == {"id_slot": 1, "filename": "one.slot", "n_restored": n_saved,
                               "n_read": body["n_written"],
                               "timings": {"restore_ms": restored.json()["timings"]["restore_ms"]}}
    warm = complete(app)
    assert warm["tokens_cached"] == (prompt_tokens - 1) // BLOCK * BLOCK
    assert warm["content"] == first["content"] == cold["content"]
    # The restored slot saves what it holds, without a request run in it.
    again = action(app, 1, "save", {"filename": "two.slot"}).json()
    assert again["n_saved"] == n_saved


def test_a_file_restores_into_a_fresh_server(server, loaded, folder):
    """What the files are for: a prefix computed before a restart is not computed again."""
    prompt = "Computed before the restart, restored after it."
    first = complete(server.app, prompt)
    assert action(server.app, 0, "save", {"filename": "restart.slot"}).status_code == 200
    with served(loaded, small_config(block_size=BLOCK, slot_save_path=str(folder))) as fresh:
        restored = action(fresh.app, 0, "restore", {"filename": "restart.slot"}).json()
        assert restored["n_restored"] > 0
        again = complete(fresh.app, prompt)
    assert again["tokens_cached"] == (first["tokens_evaluated"] - 1) // BLOCK * BLOCK
    assert again["content"] == first["content"]


def test_erase_and_restore_reach_kv_event_subscribers(server):
    """A router's precise policy learns of blocks gone and back as of any others."""
    complete(server.app, "KV events follow the slot files.")

    async def steps(c):
        await c.post("/slots/0?action=save", json={"filename": "events.slot"})
        subscription = await server.state.engine.subscribe_kv_events()
        erased = (await c.post("/slots/0?action=erase")).json()
        gone = await asyncio.wait_for(subscription.next(), 30)
        await c.post("/slots/0?action=restore", json={"filename": "events.slot"})
        back = await asyncio.wait_for(subscription.next(), 30)
        subscription.close()
        return set(subscription.snapshot.hashes), erased, gone, back

    held, erased, gone, back = run(server.app, steps)
    assert len(gone.removed) == erased["n_erased"] // BLOCK > 0 and not gone.stored
    assert set(gone.removed) <= held
    assert back.stored == gone.removed and not back.removed


def test_an_action_on_a_busy_slot_waits_for_its_request_to_end(server):
    """As llama-server defers it: the save sees the whole finished sequence."""
    async def steps(c):
        request = {**GREEDY, "prompt": "busy slot", "n_predict": 30}
        generation = asyncio.create_task(c.post("/completion", json=request))

        async def running():  # a tuple, so that slot 0 counts as found
            if generation.done():
                return (-1,)
            slots = (await c.get("/slots")).json()
            return next(((s["id"],) for s in slots if s["is_processing"]), None)

        [slot] = await async_wait_for(running, timeout=60)
        saved = await c.post(f"/slots/{slot}?action=save", json={"filename": "busy.slot"})
        return slot, (await generation).json(), saved.json()

    slot, answer, saved = run(server.app, steps)
    assert slot != -1, "the generation ended before a busy slot was seen"
    # All of it: the save ran once the request had ended, not part-way through.
    assert saved["n_saved"] == (answer["tokens_evaluated"] + 30 - 1) // BLOCK * BLOCK


def test_a_slot_that_ran_nothing_saves_an_empty_file(server):
    body = action(server.app, 1, "erase").json()
    assert body["id_slot"] == 1
    saved = action(server.app, 1, "save", {"filename": "empty.slot"}).json()
    assert saved["n_saved"] == 0
    assert action(server.app, 0, "restore", {"filename": "empty.slot"}).json()["n_restored"] == 0


@pytest.mark.parametrize("slot, name, body, status, message, param", [
    (0, "save", {"filename": "../escape.slot"}, 400, "Invalid filename", "filename"),
    (0, "save", {"filename": "/etc/passwd"}, 400, "Invalid filename", "filename"),
    (0, "restore", {"filename": ".."}, 400, "Invalid filename", "filename"),
    (0, "save", {}, 400, "Invalid filename", "filename"),
    (0, "save", None, 400, "Invalid filename", "filename"),
    (0, "save", {"filename": 7}, 400, "Invalid filename", "filename"),
    (0, "restore", {"filename": "missing.slot"}, 400, "no slot save file named missing.slot", "filename"),
    (2, "save", {"filename": "a.slot"}, 400, "Invalid slot ID 2: this server has slots 0 to 1", "id_slot"),
    (-1, "erase", None, 400, "Invalid slot ID -1", "id_slot"),
    (0, "dance", None, 400, "Invalid action", "action"),
])
def test_bad_actions_are_400s(server, folder, slot, name, body, status, message, param):
    r = action(server.app, slot, name, body)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == param
    assert not (folder.parent / "escape.slot").exists()


def test_a_file_that_is_not_a_slot_file_is_refused(server, folder):
    (folder / "junk.slot").write_bytes(b"not safetensors at all")
    r = action(server.app, 0, "restore", {"filename": "junk.slot"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("invalid slot save file: junk.slot cannot be read")


def test_a_file_from_another_model_is_refused(server, folder, tmp_path):
    k = torch.zeros(1, 4, 1, 8)
    write_file(folder / "other.slot", SlotCache([5, 6, 7, 8], "0" * 32, k, k.clone(), "other.gguf (auto weights)"))
    r = action(server.app, 0, "restore", {"filename": "other.slot"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("invalid slot save file: it was saved from other.gguf (auto weights), "
                                            f"this server runs {server.state.loaded.path.rsplit('/', 1)[-1]} "
                                            "(auto weights)")


def test_without_a_slot_save_path_the_actions_are_llama_servers_501(loaded):
    with served(loaded, small_config()) as plain:
        r = action(plain.app, 0, "save", {"filename": "a.slot"})
    assert r.status_code == 501
    assert r.json()["error"] == {
        "message": "This server does not support slots action. Start it with `--slot-save-path`",
        "type": "not_supported_error", "param": None, "code": 501}


@pytest.mark.parametrize("name", ["a.bin", "slot 0.kv", "ünïcode.slot"])
def test_plain_names_pass(name):
    assert checked_filename(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "a\\b", "c:d", "x.", " x", "x ", "a\x00b",
                                  "a\nb", "q?", "x" * 256, "\udc80"])
def test_names_with_a_path_or_special_characters_are_refused(name):
    with pytest.raises(BadRequest, match="Invalid filename"):
        checked_filename(name)


def test_a_file_round_trips_and_an_inconsistent_one_is_refused(tmp_path):
    k = torch.randn(2, 3, 1, 4).to(torch.bfloat16)
    cache = SlotCache([1, 2, 3], "ab" * 16, k, -k, "m (auto weights)")
    size = write_file(tmp_path / "f", cache)
    back, read = read_file(tmp_path / "f")
    assert read == size == (tmp_path / "f").stat().st_size
    assert (back.token_ids, back.root, back.model) == ([1, 2, 3], "ab" * 16, "m (auto weights)")
    assert torch.equal(back.k, k) and torch.equal(back.v, -k)
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no partial file left behind
    write_file(tmp_path / "g", SlotCache([1, 2], "ab" * 16, k, -k, "m"))
    with pytest.raises(SlotFileError, match="inconsistent tensors"):
        read_file(tmp_path / "g")


def test_pool_hold_and_forget():
    pool = BlockPool(num_blocks=4, block_size=2)
    a, b = pool.allocate(2)
    pool.cache_block(a, "a" * 32)
    pool.cache_block(b, "b" * 32)
    pool.free_blocks([b, a])
    assert pool.hold("a" * 32) == a and pool.hold("c" * 32) is None
    assert pool.num_free == 3 and pool.stats.queries == 0  # held, and no lookup counted
    assert pool.forget(["a" * 32, "b" * 32, "c" * 32]) == 1  # a is held: it keeps its hash
    assert pool.cached == {"a" * 32: a}
    pool.free_blocks([a])
    assert pool.forget(["a" * 32]) == 1 and pool.cached == {}


def test_saves_to_one_name_at_once_leave_one_whole_file(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    k = torch.randn(2, 64, 1, 8)
    caches = [SlotCache(list(range(64)), "0" * 32, k * i, k * -i, f"m{i}") for i in range(1, 5)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda c: write_file(tmp_path / "same", c), caches * 3))
    back, _ = read_file(tmp_path / "same")
    assert back.model in {c.model for c in caches}
    assert [p.name for p in tmp_path.iterdir()] == ["same"]
