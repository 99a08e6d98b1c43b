"""`inferd run NAME [PROMPT]`: chat with a model in this process, on the same
engine `inferd serve` runs. With PROMPT: one answer, streamed, then exit.
Without: a chat that keeps the conversation (line editing and history through
readline), `/clear` forgets it, `/exit` or Ctrl-D leaves, Ctrl-C stops an
answer. A Hugging Face name that is not stored yet is pulled first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from inferd.chat.reasoning import think_token_ids
from inferd.chat.template import ChatTemplate, TemplateError, chat_template_for
from inferd.commands.pull import pull_with_bars
from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.model_store import BadModelName, ModelName, ModelStore, StoreError
from inferd.model_store.layout import data_dir
from inferd.models.loader import load_model
from inferd.models.paths import ModelNotFoundError
from inferd.models.tokenizer import Tokenizer

HELP = "/clear forgets the conversation, /exit (or Ctrl-D) leaves, Ctrl-C stops an answer"


def run_chat(config: EngineConfig, args: argparse.Namespace) -> int:
    try:
        pull_if_missing(config.model, config.data_dir)
        if config.threads:
            torch.set_num_threads(config.threads)
        loaded = load_model(config.model, config.dtype, config.device, config.weights, config.data_dir)
        config.parallel = 1
        engine = Engine(loaded, config, think_ids=think_token_ids(loaded.tokenizer))
        template = chat_template_for(loaded.tokenizer)
    except (ModelNotFoundError, StoreError, TemplateError, ValueError) as error:
        print(f"inferd run: {error}", file=sys.stderr)
        return 1
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_p=args.min_p, seed=args.seed, stop=list(template.stop))
    chat = Chat(engine, loaded.tokenizer, template, params)
    if args.prompt is not None:
        return 0 if chat.answer(args.prompt) else 1
    return repl(chat, args.name, data_dir(config.data_dir) / "run_history")


def pull_if_missing(model: str, data_dir_option: str | None) -> None:
    if Path(model).expanduser().exists():
        return
    try:
        wanted = ModelName.parse(model)
    except BadModelName:
        return  # load_model says what is wrong with it
    store = ModelStore.open(data_dir_option)
    if wanted.is_hub_repo and store.get(wanted) is None:
        pull_with_bars(store, model)


class Chat:
    def __init__(self, engine: Engine, tokenizer: Tokenizer, template: ChatTemplate, params: SamplingParams):
        self.engine, self.tokenizer, self.template, self.params = engine, tokenizer, template, params
        self.messages: list[dict] = []
        self.turns = 0

    def clear(self) -> None:
        self.messages = []

    def answer(self, text: str) -> bool:
        """Stream the model's reply to `text` to stdout; False when it could not run."""
        self.messages.append({"role": "user", "content": text})
        try:
            ids = self.tokenizer.encode(self.template.render(self.messages))
            self.turns += 1
            request_id = f"run-{self.turns}"
            self.engine.add_request(EngineRequest(request_id, ids, self.params))
        except (ValueError, TemplateError) as error:
            self.messages.pop()
            print(f"inferd run: {error}" + (" (/clear starts over)" if len(self.messages) > 1 else ""),
                  file=sys.stderr)
            return False
        reply = []
        try:
            while self.engine.has_work:
                for out in self.engine.step():
                    reply.append(out.text)
                    sys.stdout.write(out.text)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            self.engine.abort(request_id)
        sys.stdout.write("\n")
        self.messages.append({"role": "assistant", "content": "".join(reply)})
        return True


def repl(chat: Chat, name: str, history: Path) -> int:
    try:
        import readline
    except ImportError:  # no line editing on this platform; the chat still works
        readline = None
    if readline is not None:
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    print(f"chatting with {name}: {HELP}")
    while True:
        try:
            line = input(">>> ").strip()
        except EOFError:
            print()
            break
        except KeyboardInterrupt:
            print(f"\n({HELP})")
            continue
        if not line:
            continue
        if line in ("/exit", "/bye"):
            break
        if line == "/clear":
            chat.clear()
            print("(conversation cleared)")
            continue
        if line.startswith("/"):
            print(f"({HELP})")
            continue
        chat.answer(line)
    if readline is not None:
        try:
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.set_history_length(1000)
            readline.write_history_file(history)
        except OSError:
            pass
    return 0
