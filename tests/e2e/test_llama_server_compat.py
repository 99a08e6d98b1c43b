"""Drop-in for llama-server and its clients, against one real `inferd serve`
started the way llama-server is: every point of the drop-in list is a row of a
table (the exact request, the status and the fields that must come back), all
against this one server.

The server: the tiny model, llama-server's flags (--jinja -ngl 99 -c -np via
LLAMA_ARG_N_PARALLEL, --temp 0.2 --seed 42, -n 8, -a), two listening addresses,
an inline chat template that shows what the template was given."""

from __future__ import annotations

import json

import httpx
import pytest

from server import ServerProcess

CTX = 256
ORIGIN = "http://app.example"
# Shows the template's inputs in the prompt: the roles and contents, echoed reasoning,
# a server-wide variable (--chat-template-kwargs) and enable_thinking's default.
TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{% if m.reasoning %}[r:{{ m.reasoning }}]{% endif %}"
            "{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
            "[style={{ style }}][think={{ enable_thinking }}]")
HELLO = [{"role": "user", "content": "Hello"}]
CHAT = {"messages": HELLO, "max_tokens": 4}


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("slot-files")


@pytest.fixture(scope="module")
def llama(tiny_model_dir, server_logs, slot_dir):
    server = ServerProcess(
        tiny_model_dir, port=0, threads=1, log_path=server_logs / "llama-style.log",
        # The last --host wins: clients use the first address, the server listens on both.
        extra_args=["--host", "127.0.0.1,::1", "--jinja", "-ngl", "99", "-c", str(CTX), "--temp", "0.2", "--seed", "42", "-n", "8",
                    "-fa", "-cb", "--no-warmup", "-a", "tiny-llama,second-name", "--cors-origins", ORIGIN,
                    "--chat-template", TEMPLATE, "--chat-template-kwargs", '{"style": "plain"}',
                    "--slot-save-path", str(slot_dir)],
    )
    server.env = {"LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_N_GPU_LAYERS": "99"}
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(llama):
    with llama.http(timeout=60) as c:
        yield c


def apply_template(http, **body) -> str:
    r = http.post("/apply-template", json=body)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


# -- serving and the command line -----------------------------------------------------------

def test_it_starts_from_a_llama_server_command_line_and_says_what_it_ignored(llama, http):
    assert llama.model_name == "tiny-llama"
    log = llama.log_path.read_text()
    assert log.count("ignoring llama-server options") == 1
    assert "-ngl, -fa, -cb, --no-warmup, LLAMA_ARG_N_GPU_LAYERS" in log
    assert f"context: {CTX} tokens per sequence (-c here), {2 * CTX} across the 2 slots" in log


def test_props_report_the_server_defaults(http):
    props = http.get("/props").json()
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["seed"], params["n_predict"]) == (0.2, 42, 8)
    assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (2, CTX)
    assert props["chat_template"] == TEMPLATE


@pytest.mark.parametrize("path, body, text", [
    ("/v1/chat/completions", {"messages": HELLO}, lambda r: r["choices"][0]["message"]["content"]),
    ("/completion", {"prompt": "Once upon a time"}, lambda r: r["content"]),
])
def test_unseeded_requests_take_the_server_seed_so_they_repeat(http, path, body, text):
    first, second = (http.post(path, json=body) for _ in range(2))
    assert first.status_code == second.status_code == 200
    assert text(first.json()) == text(second.json())
    usage = first.json().get("usage") or {"completion_tokens": first.json()["tokens_predicted"]}
    assert usage["completion_tokens"] <= 8  # -n 8


def test_both_addresses_listen(llama):
    for host in ("127.0.0.1", "[::1]"):
        assert httpx.get(f"http://{host}:{llama.port}/health").status_code == 200


# -- model names ---------------------------------------------------------------------------

def test_the_alias_is_the_model_id(http):
    loaded = [m["id"] for m in http.get("/v1/models").json()["data"] if m.get("loaded")]
    assert loaded == ["tiny-llama"]


@pytest.mark.parametrize("asked, reported", [
    ("tiny-llama", "tiny-llama"), ("second-name", "second-name"), ("gpt-4o", "tiny-llama"),
    ("claude-3-5-sonnet", "tiny-llama"), ("test", "tiny-llama"), (None, "tiny-llama"),
])
def test_any_model_name_goes_to_the_one_model_served(http, asked, reported):
    body = {**CHAT, **({"model": asked} if asked else {})}
    r = http.post("/v1/chat/completions", json=body)
    assert (r.status_code, r.json().get("model")) == (200, reported), r.text


# -- HTTP behaviour -------------------------------------------------------------------------

@pytest.mark.parametrize("name, method, path, kwargs, status, check", [
    ("cors-preflight", "OPTIONS", "/v1/chat/completions",
     {"headers": {"origin": ORIGIN, "access-control-request-method": "POST",
                  "access-control-request-headers": "authorization,content-type"}},
     200, lambda r: r.headers["access-control-allow-origin"] == ORIGIN
     and "authorization" in r.headers["access-control-allow-headers"].lower()),
    ("cors-answer", "POST", "/v1/chat/completions", {"json": CHAT, "headers": {"origin": ORIGIN}},
     200, lambda r: r.headers["access-control-allow-origin"] == ORIGIN),
    ("native-completions", "POST", "/completions", {"json": {"prompt": "Hi", "n_predict": 2}},
     200, lambda r: r.json()["stop"] is True and "content" in r.json() and "choices" not in r.json()),
    ("curl-d-form-type", "POST", "/v1/chat/completions",
     {"content": json.dumps(CHAT), "headers": {"content-type": "application/x-www-form-urlencoded"}},
     200, lambda r: r.json()["object"] == "chat.completion"),
    ("no-content-type", "POST", "/completion", {"content": json.dumps({"prompt": "Hi", "n_predict": 1})},
     200, lambda r: r.json()["tokens_predicted"] == 1),
    ("not-json", "POST", "/v1/chat/completions",
     {"content": "messages=hi", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     415, lambda r: "Content-Type: application/json" in r.json()["error"]["message"]),
    ("context-overflow", "POST", "/v1/chat/completions",
     {"json": {"messages": [{"role": "user", "content": "word " * 400}]}},
     400, lambda r: r.json()["error"]["type"] == "exceed_context_size_error"
     and r.json()["error"]["n_ctx"] == CTX and r.json()["error"]["n_prompt_tokens"] > CTX
     and "exceeds the available context size" in r.json()["error"]["message"]),
    ("context-overflow-completion", "POST", "/completion", {"json": {"prompt": "word " * 400}},
     400, lambda r: r.json()["error"]["type"] == "exceed_context_size_error" and r.json()["error"]["n_ctx"] == CTX),
    ("healthz", "GET", "/healthz", {},
     200, lambda r: r.json()["status"] == "ok" and r.json()["slots_idle"] + r.json()["slots_processing"] == 2
     and r.json()["ctx_size"] == CTX and r.json()["max_parallel"] == 2 and r.json()["waiting"] == 0),
    ("slot-save-traversal", "POST", "/slots/0?action=save", {"json": {"filename": "../a.bin"}},
     400, lambda r: r.json()["error"]["message"].startswith("Invalid filename")),
    ("slot-restore-missing", "POST", "/slots/0?action=restore", {"json": {"filename": "none.bin"}},
     400, lambda r: "no slot save file named none.bin" in r.json()["error"]["message"]),
    ("slot-bad-action", "POST", "/slots/0?action=dance", {"json": {}},
     400, lambda r: r.json()["error"]["param"] == "action"),
    ("response-fields", "POST", "/completion",
     {"json": {"prompt": "Hi", "n_predict": 2, "response_fields": ["content", "generation_settings/n_predict"]}},
     200, lambda r: set(r.json()) == {"content", "generation_settings/n_predict"}
     and r.json()["generation_settings/n_predict"] == 2),
    ("post-sampling-probs", "POST", "/completion",
     {"json": {"prompt": "Hi", "n_predict": 1, "n_probs": 2, "post_sampling_probs": True}},
     200, lambda r: 0 <= r.json()["completion_probabilities"][0]["prob"] <= 1
     and 1 <= len(r.json()["completion_probabilities"][0]["top_probs"]) <= 2),
    # After truncation: top_k 2 leaves two candidates (top_p and min_p off), renormalized.
    ("post-sampling-probs-truncated", "POST", "/completion",
     {"json": {"prompt": "Hi", "n_predict": 1, "n_probs": 4, "post_sampling_probs": True, "top_k": 2, "top_p": 1.0,
               "min_p": 0.0, "temperature": 1.0}},
     200, lambda r: len(r.json()["completion_probabilities"][0]["top_probs"]) == 2
     and abs(sum(t["prob"] for t in r.json()["completion_probabilities"][0]["top_probs"]) - 1) < 1e-6),
    ("prompt-string", "POST", "/completion", {"json": {"prompt": {"prompt_string": "Hello"}, "n_predict": 1}},
     200, lambda r: r.json()["prompt"].endswith("Hello")),
    ("loop-guard-on-completion", "POST", "/completion",
     {"json": {"prompt": "Hi", "max_pattern_size": 2, "min_count": 1}},
     400, lambda r: "loop guard" in r.json()["error"]["message"]),
    ("loop-guard-min-pattern-size", "POST", "/completion",
     {"json": {"prompt": "Hi", "max_pattern_size": 2, "min_count": 2, "min_pattern_size": 3}},
     400, lambda r: r.json()["error"]["param"] == "min_pattern_size" and "loop guard" in r.json()["error"]["message"]),
    ("loop-guard-min-pattern-size-on-chat", "POST", "/v1/chat/completions",
     {"json": {**CHAT, "max_pattern_size": 2, "min_count": 2, "min_pattern_size": 3}},
     400, lambda r: r.json()["error"]["param"] == "min_pattern_size"),
    ("loop-guard-min-pattern-size-on-ollama", "POST", "/api/chat",
     {"json": {"model": "tiny-llama", "messages": HELLO, "stream": False,
               "options": {"num_predict": 4, "max_pattern_size": 2, "min_count": 2, "min_pattern_size": 3}}},
     400, lambda r: "min_pattern_size" in r.json()["error"]),
    ("loop-guard-min-pattern-size-ok", "POST", "/completion",
     {"json": {"prompt": "Hi", "n_predict": 2, "max_pattern_size": 2, "min_count": 2, "min_pattern_size": 2}},
     200, lambda r: r.json()["tokens_predicted"] <= 2),
    ("loop-guard-on-completions", "POST", "/v1/completions",
     {"json": {"prompt": "Hi", "max_pattern_size": 2, "min_count": 1}},
     400, lambda r: "loop guard" in r.json()["error"]["message"]),
    ("loop-guard-on-messages", "POST", "/v1/messages",
     {"json": {"messages": HELLO, "max_tokens": 4, "max_pattern_size": 2, "min_count": 1}},
     400, lambda r: "loop guard" in r.json()["error"]["message"]),
    ("loop-guard-on-responses", "POST", "/v1/responses",
     {"json": {"input": "Hi", "max_output_tokens": 4, "max_pattern_size": 2, "min_count": 1}},
     400, lambda r: "loop guard" in r.json()["error"]["message"]),
    ("loop-guard-on-ollama", "POST", "/api/generate",
     {"json": {"model": "tiny-llama", "prompt": "Hi", "stream": False,
               "options": {"num_predict": 4, "max_pattern_size": 2, "min_count": 1}}},
     400, lambda r: "loop guard" in r.json()["error"]),
])
def test_http_behaviour(http, name, method, path, kwargs, status, check):
    r = http.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert check(r), r.text


def test_a_saved_slot_restores_into_the_cache(http, slot_dir):
    """Save what slot 0 ran, erase it, restore it: the same prompt then starts from the restored
    blocks and answers exactly as before."""
    body = {"prompt": "A prompt long enough to fill a few blocks of sixteen tokens.", "n_predict": 4,
            "temperature": 0}
    first = http.post("/completion", json=body).json()
    saved = http.post("/slots/0?action=save", json={"filename": "kept.bin"}).json()
    assert saved["n_saved"] == (first["tokens_evaluated"] + 3) // 16 * 16
    assert saved["n_written"] == (slot_dir / "kept.bin").stat().st_size
    assert http.post("/slots/0?action=erase").json() == {"id_slot": 0, "n_erased": saved["n_saved"]}
    restored = http.post("/slots/0?action=restore", json={"filename": "kept.bin"}).json()
    assert (restored["n_restored"], restored["n_read"]) == (saved["n_saved"], saved["n_written"])
    again = http.post("/completion", json=body).json()
    assert again["tokens_cached"] == (first["tokens_evaluated"] - 1) // 16 * 16 > 0
    assert again["content"] == first["content"]


@pytest.mark.parametrize("path", ["/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"])
def test_input_tokens_counts_what_a_chat_would_take(http, path):
    used = http.post("/v1/chat/completions", json=CHAT).json()["usage"]["prompt_tokens"]
    r = http.post(path, json={"messages": HELLO})
    assert r.status_code == 200
    assert r.json() == {"object": "response.input_tokens", "input_tokens": used}


def test_system_fingerprint_is_stable(http):
    prints = {http.post("/v1/chat/completions", json=CHAT).json()["system_fingerprint"] for _ in range(2)}
    prints.add(http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1}).json()["system_fingerprint"])
    [fingerprint] = prints
    assert fingerprint.startswith("fp_") and len(fingerprint) == 15


# -- chat templates and reasoning controls --------------------------------------------------

@pytest.mark.parametrize("name, body, prompt", [
    ("server-kwargs-and-thinking-on", {"messages": HELLO}, "<user>Hello\n<assistant>[style=plain][think=True]"),
    ("request-kwargs-win", {"messages": HELLO, "chat_template_kwargs": {"style": "fancy", "enable_thinking": False}},
     "<user>Hello\n<assistant>[style=fancy][think=False]"),
    ("extra-body-kwargs", {"messages": HELLO, "extra_body": {"chat_template_kwargs": {"style": "nested"}}},
     "<user>Hello\n<assistant>[style=nested][think=True]"),
    ("assistant-prefill", {"messages": [*HELLO, {"role": "assistant", "content": "Sure, the"}]},
     "<user>Hello\n<assistant>Sure, the"),
    ("continue-final-message", {"messages": [*HELLO, {"role": "assistant", "content": "Sure"}],
                                "continue_final_message": True, "add_generation_prompt": False},
     "<user>Hello\n<assistant>Sure"),
    ("a-new-turn-when-asked", {"messages": [*HELLO, {"role": "assistant", "content": "Hi"}],
                               "add_generation_prompt": True},
     "<user>Hello\n<assistant>Hi\n<assistant>[style=plain][think=True]"),
    ("reasoning-under-both-names", {"messages": [*HELLO, {"role": "assistant", "content": "A",
                                                           "reasoning_content": "R1"}, {"role": "user", "content": "B"}]},
     "<user>Hello\n<assistant>[r:R1]A\n<user>B\n<assistant>[style=plain][think=True]"),
    ("preserve-thinking-false", {"messages": [*HELLO, {"role": "assistant", "content": "A", "reasoning": "R1"},
                                              {"role": "user", "content": "B"}],
                                 "chat_template_kwargs": {"preserve_thinking": False}},
     "<user>Hello\n<assistant>A\n<user>B\n<assistant>[style=plain][think=True]"),
])
def test_the_template_gets_what_llama_server_clients_send(http, name, body, prompt):
    assert apply_template(http, **body) == prompt


def test_continue_final_message_and_add_generation_prompt_is_a_400(http):
    r = http.post("/v1/chat/completions", json={"messages": [*HELLO, {"role": "assistant", "content": "S"}],
                                                "continue_final_message": True, "add_generation_prompt": True})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "continue_final_message"


def test_a_prefilled_answer_continues_the_message(http):
    messages = [*HELLO, {"role": "assistant", "content": "Sure, the"}]
    counted = http.post("/v1/chat/completions/input_tokens", json={"messages": messages}).json()["input_tokens"]
    r = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == counted


@pytest.mark.parametrize("fields", [
    {"json_schema": {"type": "boolean"}},
    {"response_format": {"type": "json_object", "schema": {"type": "boolean"}}},
])
def test_llama_server_structured_output_fields_are_honoured(http, fields):
    r = http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 16, **fields})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"]) in (True, False)
