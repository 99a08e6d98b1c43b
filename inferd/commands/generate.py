"""`inferd generate`: the smallest real use of the engine."""

from __future__ import annotations

import argparse
import sys

import torch

from inferd.config import EngineConfig
from inferd.engine.engine import Engine
from inferd.engine.engine_request import EngineRequest
from inferd.engine.sampling_params import SamplingParams
from inferd.models.loader import load_model
from inferd.models.paths import ModelNotFoundError


def run_generate(config: EngineConfig, args: argparse.Namespace) -> int:
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        loaded = load_model(config.model, config.dtype, config.device, config.weights, config.data_dir)
    except (ModelNotFoundError, ValueError) as e:
        print(f"inferd: {e}", file=sys.stderr)
        return 2
    config.parallel = 1
    engine = Engine(loaded, config)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_p=args.min_p, seed=args.seed)
    prompt = loaded.tokenizer.encode(args.prompt)
    try:
        engine.add_request(EngineRequest("generate", prompt, params))
    except ValueError as e:
        print(f"inferd: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(args.prompt)
    while engine.has_work:
        for out in engine.step():
            sys.stdout.write(out.text)
            sys.stdout.flush()
    sys.stdout.write("\n")
    return 0
