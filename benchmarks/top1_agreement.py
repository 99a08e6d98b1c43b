"""How closely each server follows an fp32 reference of the same GGUF: top-1
agreement on teacher-forced tokens.

    python benchmarks/top1_agreement.py [--llama-server PATH] [--tokens 2000] [--isa avx2]

The reference is the bundled GGUF dequantized to float32 and computed densely
in float32 (`--dtype float32 --weights bf16`), fed one token per step. Its
greedy continuations of fixed prompts make the token stream; at each position
the reference's top-1 is the next token of that stream. Each server then gets
every prefix of the stream as a `/completion` request (token ids, one token
predicted at temperature 0, `n_probs` 1, the prefix cached from the request
before) and scores when its top token is the reference's. inferd is also
scored in-process, fed one token per step as decoding feeds it.
"""

from __future__ import annotations

import argparse
import os
import sys

import httpx
from compare_llama_server import Server, find_llama_server, free_port
from weights_agreement import PROMPTS, Decoder

from inferd.models.default import default_model_path
from inferd.models.loader import load_model


def reference_stream(total: int) -> tuple[list[list[int]], list[int]]:
    """(prompt token ids, how many continuation tokens to score) per prompt, the
    continuations greedy under the fp32 reference, `total` positions in all."""
    reference = load_model(None, "float32", "cpu", "bf16")
    per_prompt = -(-total // len(PROMPTS))
    sequences, counts = [], []
    for text in PROMPTS:
        prompt = reference.tokenizer.encode(text)
        decoder, token, continuation = Decoder(reference, max_len=len(prompt) + per_prompt + 1), prompt[-1], []
        for t in prompt[:-1]:
            decoder.step(t)
        for _ in range(min(per_prompt, total - sum(counts))):
            token = int(decoder.step(token).argmax())
            continuation.append(token)
        sequences.append(prompt + continuation)
        counts.append(len(continuation))
    return sequences, counts


def in_process(sequences: list[list[int]], counts: list[int]) -> float:
    """inferd's default path (`--dtype auto --weights auto`), one token per step."""
    loaded = load_model()
    agree = 0
    for sequence, count in zip(sequences, counts):
        decoder, start = Decoder(loaded, max_len=len(sequence)), len(sequence) - count
        for i, token in enumerate(sequence[:-1]):
            logits = decoder.step(token)
            agree += i + 1 >= start and int(logits.argmax()) == sequence[i + 1]
    return agree / sum(counts)


def over_http(url: str, sequences: list[list[int]], counts: list[int]) -> float:
    agree = 0
    with httpx.Client(base_url=url, timeout=120) as client:
        for sequence, count in zip(sequences, counts):
            for end in range(len(sequence) - count, len(sequence)):
                body = {"prompt": sequence[:end], "n_predict": 1, "temperature": 0, "n_probs": 1,
                        "cache_prompt": True, "return_tokens": True}
                answer = client.post("/completion", json=body).raise_for_status().json()
                agree += top_token(answer) == sequence[end]
    return agree / sum(counts)


def top_token(answer: dict) -> int:
    """The most probable next token, from `n_probs` where the answer has it, else the greedy token."""
    probabilities = answer.get("completion_probabilities") or []
    if probabilities:
        top = probabilities[0].get("top_logprobs") or probabilities[0].get("top_probs") or []
        if top and "id" in top[0]:
            return top[0]["id"]
    return answer["tokens"][0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", default=None, help="path to the llama-server binary")
    parser.add_argument("--tokens", type=int, default=2000, help="teacher-forced positions scored")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--isa", default=None, help="INFERD_ISA for inferd's kernels")
    args = parser.parse_args()
    if args.isa:
        os.environ["INFERD_ISA"] = args.isa
    sequences, counts = reference_stream(args.tokens)
    print(f"{sum(counts)} teacher-forced tokens after {len(PROMPTS)} prompts; reference: the GGUF in float32",
          flush=True)
    print(f"inferd, in process (decode steps): {in_process(sequences, counts):.2%}", flush=True)
    llama_server, inferd_port, llama_port = find_llama_server(args.llama_server, False), free_port(), free_port()
    servers = [Server("inferd", [sys.executable, "-m", "inferd.cli", "serve", "--port", str(inferd_port),
                                 "--threads", str(args.threads)], inferd_port),
               Server("llama-server", [str(llama_server), "-m", str(default_model_path()), "--host", "127.0.0.1",
                                       "--port", str(llama_port), "-t", str(args.threads), "--no-webui"],
                      llama_port, env={"LD_LIBRARY_PATH": str(llama_server.parent)})]
    for server in servers:
        try:
            server.start()
            print(f"{server.name}, /completion: {over_http(server.url, sequences, counts):.2%}", flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
