"""llama-server's command line on `inferd serve` (inferd/cli_llama.py): no
abbreviated flags, its spellings and LLAMA_ARG_* variables, its hardware-only
flags as no-ops logged once; and the small pieces behind the drop-in points
that need no server (model names, the router's header, listening addresses)."""

from __future__ import annotations

import logging
import re
import socket
from types import SimpleNamespace

import pytest

from inferd.chat.template import TemplateError, chat_template_for
from inferd.cli import build_parser
from inferd.cli_llama import log_ignored, normalized
from inferd.cli_options import build
from inferd.commands.sockets import bind_all, hosts_of
from inferd.config import ServeConfig
from inferd.router.policies.direct import DirectPolicy, UnknownWorkerError
from inferd.serving.chat_defaults import check_chat_defaults, template_defaults
from inferd.serving.served_models import CHAT, EMBED, ServedModel, ServedModels

LLAMA_LINE = ("--jinja -ngl 99 -c 2048 -np 4 --temp 0.2 --seed 42 --port 8080 -fa --flash-attn on -cb --no-warmup "
              "-n 128 --top-k 20 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.1 --presence-penalty 0.5 "
              "--frequency-penalty 0.25 -a first,second --cors-origins http://a.example,http://b.example "
              "--chat-template-file t.jinja --chat-template-kwargs {\"enable_thinking\":false} -b 2048 -ub 512 "
              "--mlock --no-mmap -ctk q8_0 --n-parallel 3").split()


def parse(argv: list[str]):
    args = build_parser().parse_args(["serve", *argv])
    return args, normalized(build(ServeConfig, args))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith(("LLAMA_", "INFERD_")):
            monkeypatch.delenv(name)


def test_a_llama_server_command_line_starts_inferd_with_its_meaning():
    args, config = parse(LLAMA_LINE)
    assert (config.ctx_size, config.parallel, config.port, config.default_max_tokens) == (2048, 3, 8080, 128)
    assert (config.temperature, config.seed, config.top_k, config.top_p, config.min_p) == (0.2, 42, 20, 0.9, 0.1)
    assert (config.repeat_penalty, config.presence_penalty, config.frequency_penalty) == (1.1, 0.5, 0.25)
    assert config.alias == ["first", "second"]
    assert config.cors_origin == ["http://a.example", "http://b.example"]
    assert config.chat_template == "t.jinja"
    assert template_defaults(config) == {"enable_thinking": False}
    assert args.llama_server_ignored == ["--jinja", "-ngl", "-fa", "--flash-attn", "-cb", "--no-warmup", "-b", "-ub",
                                         "--mlock", "--no-mmap", "-ctk"]


@pytest.mark.parametrize("argv, message", [
    (["-n", "64"], None),  # -n is --n-predict, never an abbreviation of --parallel
    (["--para", "2"], "unrecognized arguments: --para 2"),
    (["--ctx", "10"], "unrecognized arguments: --ctx 10"),
    (["--gpu-layerz", "1"], "unrecognized arguments: --gpu-layerz 1"),
])
def test_flags_are_never_abbreviated_and_an_unknown_one_is_named(argv, message, capsys):
    if message is None:
        _, config = parse(argv)
        assert (config.default_max_tokens, config.parallel) == (64, 4)
        return
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_n_predict_minus_one_is_no_limit():
    assert parse(["-n", "-1"])[1].default_max_tokens is None


def test_api_keys_are_comma_separated_and_an_empty_one_stays_to_be_refused():
    assert parse(["--api-key", "k1,k2", "--api-key", "k3"])[1].api_key == ["k1", "k2", "k3"]
    assert parse(["--api-key", ""])[1].api_key == [""]


def test_reasoning_format_auto_is_deepseek():
    assert parse(["--reasoning-format", "auto"])[1].reasoning_format == "deepseek"


def test_llama_arg_variables_are_read_and_inferd_ones_win(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1024")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "2")
    monkeypatch.setenv("LLAMA_API_KEY", "k1,k2")
    monkeypatch.setenv("LLAMA_ARG_TEMPERATURE", "0.3")
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_METRICS", "1")
    monkeypatch.setenv("LLAMA_ARG_CHAT_TEMPLATE_FILE", "x.jinja")
    monkeypatch.setenv("INFERD_PARALLEL", "6")
    _, config = parse([])
    assert (config.ctx_size, config.parallel, config.api_key, config.temperature) == (1024, 6, ["k1", "k2"], 0.3)
    assert config.metrics is True and config.chat_template == "x.jinja"
    assert parse(["-c", "512"])[1].ctx_size == 512  # the command line wins over both


def test_llama_servers_draft_model_flags_mean_inferds(monkeypatch):
    args, config = parse(["-md", "draft.gguf", "--draft-max", "8", "--draft-min", "2", "-ngld", "99"])
    assert (config.draft_model, config.spec_tokens) == ("draft.gguf", 8)
    assert args.llama_server_ignored == ["--draft-min", "-ngld"]
    assert parse(["--model-draft", "d.gguf", "--draft", "3"])[1].draft_model == "d.gguf"
    monkeypatch.setenv("LLAMA_ARG_MODEL_DRAFT", "env.gguf")
    monkeypatch.setenv("LLAMA_ARG_DRAFT_MAX", "6")
    _, config = parse([])
    assert (config.draft_model, config.spec_tokens) == ("env.gguf", 6)


def test_a_bad_llama_variable_names_itself(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "big")
    with pytest.raises(SystemExit, match="LLAMA_ARG_CTX_SIZE='big' is not a valid int"):
        parse([])


def test_ignored_flags_and_variables_are_logged_once(monkeypatch, caplog):
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "99")
    args, _ = parse(["-ngl", "1", "-ngl", "2", "--flash-attn"])
    with caplog.at_level(logging.INFO, logger="inferd.serve"):
        log_ignored(args)
    [record] = caplog.records
    assert record.getMessage().endswith(": -ngl, --flash-attn, LLAMA_ARG_N_GPU_LAYERS")


def test_help_documents_the_context_difference(capsys):
    with pytest.raises(SystemExit):
        parse(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Unlike llama-server's -c, the total across its slots, each of the --parallel sequences gets" in out
    assert "llama-server flags accepted and ignored" in out and "--n-gpu-layers" in out


@pytest.mark.parametrize("options, message", [
    ({"chat_template_kwargs": "{nope"}, "--chat-template-kwargs is not valid JSON"),
    ({"chat_template_kwargs": "[1]"}, "--chat-template-kwargs must be a JSON object"),
    ({"chat_template_kwargs": '{"messages": []}'}, "--chat-template-kwargs may not set messages"),
    ({"default_model": "gpt-4o"}, "--default-model 'gpt-4o' is not served here; it must be one of 'a', 'tiny'"),
    ({"reasoning_format": "deepseek-legacy"}, "--reasoning-format must be deepseek (or auto, the same) or none"),
])
def test_server_chat_defaults_that_cannot_work_stop_start_up(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_chat_defaults(ServeConfig(alias=["a"], **options), "tiny")
    check_chat_defaults(ServeConfig(alias=["a"], default_model="a"), "tiny")


def roster(*models: ServedModel, default=None, strict=False, hosted=0) -> ServedModels:
    """`hosted`: how many models load on demand beside these."""
    served = ServedModels()
    for m in models:
        served.add(m)
    served.loaded, served.default, served.strict = True, default, strict
    served.hosted = lambda: hosted
    return served


CHAT_MODEL = ServedModel("tiny-llama", frozenset({CHAT}), ("second", "tiny"))
EMBEDDER = ServedModel("minilm", frozenset({EMBED}))


@pytest.mark.parametrize("served, asked, meant", [
    (roster(CHAT_MODEL), "tiny-llama", "tiny-llama"),
    (roster(CHAT_MODEL), "second", "tiny-llama"),
    (roster(CHAT_MODEL), "gpt-4o", "tiny-llama"),  # one model served: it answers every name
    (roster(CHAT_MODEL, strict=True), "gpt-4o", None),  # --strict-model-names
    (roster(CHAT_MODEL, EMBEDDER), "gpt-4o", None),  # two models: a name must mean one
    (roster(CHAT_MODEL, EMBEDDER, default="tiny"), "gpt-4o", "tiny-llama"),  # --default-model
    (roster(CHAT_MODEL, EMBEDDER, default="tiny"), "minilm", "minilm"),
    (roster(CHAT_MODEL, hosted=1), "gpt-4o", None),  # a stored model besides: two models, a name must mean one
    (roster(CHAT_MODEL, hosted=1), "tiny", "tiny-llama"),
    (roster(CHAT_MODEL, hosted=1, default="tiny"), "gpt-4o", "tiny-llama"),
    (roster(hosted=1), "gpt-4o", None),  # only a model loaded on demand: not the roster's to answer for
])
def test_which_model_a_name_means(served, asked, meant):
    found = served.meant(asked)
    assert (found.name if found else None) == meant


def test_the_router_takes_either_worker_header():
    workers = [SimpleNamespace(id="a"), SimpleNamespace(id="b")]
    request = SimpleNamespace(headers={"x-worker-instance-id": "b"})
    assert DirectPolicy().choose(request, workers).worker.id == "b"
    request = SimpleNamespace(headers={"x-worker-id": "a", "x-worker-instance-id": "b"})
    assert DirectPolicy().choose(request, workers).worker.id == "a"  # the first name wins
    with pytest.raises(UnknownWorkerError, match="x-worker-instance-id: no worker 'zz'"):
        DirectPolicy(lookup=lambda _: None).choose(SimpleNamespace(headers={"x-worker-instance-id": "zz"}), workers)


def test_several_addresses_listen_on_one_port():
    sockets = bind_all(hosts_of("127.0.0.1, ::1"), 0)
    try:
        ports = {s.getsockname()[1] for s in sockets}
        assert len(sockets) == 2 and len(ports) == 1
        for s, family in zip(sockets, (socket.AF_INET, socket.AF_INET6)):
            assert s.family == family
    finally:
        for s in sockets:
            s.close()


@pytest.mark.parametrize("host, message", [
    ("a.sock,127.0.0.1", "a Unix socket path cannot be listed with other addresses"),
    (" , ", "--host is empty"),
])
def test_addresses_that_cannot_be_listened_on_together(host, message):
    with pytest.raises(ValueError, match=message):
        hosts_of(host)


def test_an_address_in_use_is_named():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind_all(["::1", "127.0.0.1"], port)
    finally:
        taken.close()


@pytest.mark.parametrize("value, message", [
    ("mistral-v7", "one of llama-server's built-in templates, which inferd does not bundle"),
    ("{% for m in messages %}", "the chat template does not compile"),
    ("no-such-template", "is neither a built-in (transcript, gemma, chatml, llama3), a file, nor Jinja template text"),
])
def test_an_unusable_chat_template_is_refused_without_a_model(value, message):
    # What `inferd serve` checks before any weights load (commands/serve.py check_chat_template).
    no_model = SimpleNamespace(chat_template=None, bos_token=None, eos_token=None)
    with pytest.raises(TemplateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        chat_template_for(no_model, value)
    text = chat_template_for(no_model, "{{ messages[0].content }}!")  # template text is one
    assert text.render([{"role": "user", "content": "hi"}]) == "hi!"


@pytest.mark.parametrize("body, media, status", [
    (b'{"prompt": "' + b"x" * 100_000 + b'"}', "text/plain", 200),  # parsed off the event loop
    (b'{"prompt": "hi"}', "application/x-www-form-urlencoded", 200),  # curl -d
    (b"prompt=hi", "application/x-www-form-urlencoded", 415),
    (b"[" * 100_000 + b"]" * 100_000, "text/plain", 200),  # too deep: the route says so in its words
])
def test_a_json_body_is_taken_whatever_its_declared_type(body, media, status):
    import asyncio

    import httpx
    from starlette.responses import JSONResponse

    from inferd.http.body_limits import BodyLimits
    from inferd.http.errors import error_response

    async def app(scope, receive, send):
        headers = dict(scope["headers"])
        await JSONResponse({"type": headers[b"content-type"].decode()})(scope, receive, send)

    limited = BodyLimits(app, max_body_size=2**20, respond=lambda path, err: error_response(err))

    async def go():
        transport = httpx.ASGITransport(app=limited)
        async with httpx.AsyncClient(transport=transport, base_url="http://inferd") as client:
            return await client.post("/completion", content=body, headers={"content-type": media})

    r = asyncio.run(go())
    assert r.status_code == status
    if status == 200:
        assert r.json() == {"type": "application/json"}  # the route reads it as JSON



def test_slot_save_path_is_an_existing_folder_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slots").mkdir()
    assert parse(["--slot-save-path", "slots"])[1].slot_save_path == str(tmp_path / "slots")
    assert parse([])[1].slot_save_path is None
    for missing in ("nowhere", "file.txt"):
        (tmp_path / "file.txt").write_text("x")
        with pytest.raises(SystemExit, match=f"--slot-save-path {missing}: not a directory; create it first"):
            parse(["--slot-save-path", missing])
