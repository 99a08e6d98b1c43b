"""Drafts from a smaller model that shares the served model's tokenizer
(`--draft-model`): a few greedy tokens per call, which the served model then
verifies as it verifies prompt-lookup drafts, so output is unchanged.

The draft model keeps its own KV cache, one fixed run of blocks per
sequence slot (`--parallel`), and remembers which tokens that cache holds:
each call computes only what changed since (the tokens the served model
accepted, and its own next token), from the first position where the
request's tokens and the cached ones part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from inferd.engine.request import Request
from inferd.engine.runner import ModelRunner
from inferd.engine.scheduler import ScheduledBatch
from inferd.models.loader import LoadedModel


def check_shared_tokenizer(draft: LoadedModel, target: LoadedModel) -> None:
    """Drafts are token ids: the two tokenizers must give every piece the same id."""
    if draft.tokenizer.backend.vocab() != target.tokenizer.backend.vocab():
        raise ValueError(f"--draft-model {draft.name} does not share {target.name}'s tokenizer (their vocabularies "
                         "differ); pick a draft model of the same family, tokenized the same way")


@dataclass
class _Sequence:
    request_id: str = ""
    cached: list[int] = field(default_factory=list)  # the tokens whose K/V the slot's blocks hold, in order


class DraftModel:
    def __init__(self, loaded: LoadedModel, target: LoadedModel, max_seqs: int, max_model_len: int,
                 block_size: int):
        check_shared_tokenizer(loaded, target)
        self.loaded = loaded
        self.vocab_size = target.config.vocab_size
        self.max_len = min(max_model_len, loaded.config.max_position_embeddings)  # positions it can compute
        self.blocks_per_seq = -(-max_model_len // block_size)
        self.runner = ModelRunner(loaded.model, self.blocks_per_seq * max_seqs, block_size, loaded.dtype,
                                  loaded.device)
        self.sequences = [_Sequence() for _ in range(max_seqs)]

    def propose(self, req: Request, num_tokens: int) -> list[int]:
        """Up to `num_tokens` greedy tokens of the draft model after `req`'s tokens
        (fewer where its context ends first)."""
        tokens = req.all_token_ids
        num_tokens = min(num_tokens, self.max_len - len(tokens) + 1)  # the last draft is never fed
        seq = self.sequences[req.slot]
        if seq.request_id != req.request_id:
            seq.request_id, seq.cached = req.request_id, []
        same = 0
        for a, b in zip(seq.cached, tokens[:-1]):  # the last token is always computed: its logits draft
            if a != b:
                break
            same += 1
        table = list(range(req.slot * self.blocks_per_seq, (req.slot + 1) * self.blocks_per_seq))
        drafts: list[int] = []
        while len(drafts) < num_tokens:
            fed = tokens + drafts
            probe = Request(req.request_id, fed, req.params, block_table=table, num_computed_tokens=same)
            logits = self.runner.run(ScheduledBatch([probe], [len(fed) - same])).logits
            token = int(torch.argmax(logits[-1]))
            same = len(fed)
            seq.cached = fed
            if token >= self.vocab_size:
                break  # a padded id past the served model's vocabulary
            drafts.append(token)
        return drafts
