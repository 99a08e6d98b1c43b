"""Putting a pooled model together: its forward, the thread that runs it,
and its batcher. An encoder gets a thread of its own; a chat model's pooled
forwards run on the chat engine's thread between its steps, so the two never
compute at once on the same weights."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from inferd.engine.async_engine import AsyncEngine
from inferd.engine.embedding.batcher import PooledBatcher
from inferd.engine.embedding.forward import DecoderForward, EncoderForward
from inferd.engine.embedding.model import PooledModel
from inferd.models.encoder_loader import LoadedEncoder
from inferd.models.loader import LoadedModel


def pooled_encoder(loaded: LoadedEncoder, max_batch_tokens: int, max_queue: int) -> PooledModel:
    forward = EncoderForward(loaded.model, loaded.pooling.mode, loaded.pooling.normalize, loaded.device)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"inferd-{loaded.kind}")

    async def run(batch):
        return await asyncio.get_running_loop().run_in_executor(executor, forward, batch)

    batcher = PooledBatcher(run, max(max_batch_tokens, loaded.max_tokens), max_queue)
    tokenizer = loaded.tokenizer

    def close():
        batcher.close()
        executor.shutdown(wait=False, cancel_futures=True)

    return PooledModel(
        name=loaded.name, kind="rerank" if loaded.kind == "rerank" else "embed", pooling=loaded.pooling.mode,
        normalized=loaded.pooling.normalize and loaded.pooling.mode != "none", dimensions=loaded.config.hidden_size, max_tokens=loaded.max_tokens,
        vocab_size=loaded.config.vocab_size, trailing_specials=tokenizer.trailing_specials, encode=tokenizer.encode,
        encode_pairs=tokenizer.encode_pairs if loaded.kind == "rerank" else None, batcher=batcher, close=close)


def pooled_chat_model(loaded: LoadedModel, engine: AsyncEngine, pooling: str, max_batch_tokens: int,
                      max_queue: int) -> PooledModel:
    """A chat model's embeddings: its last hidden states pooled (last or mean) and normalized."""
    forward = DecoderForward(loaded.model, pooling, True, loaded.device, loaded.dtype)
    max_tokens = engine.engine.max_model_len

    async def run(batch):
        return await engine.call(lambda _: forward(batch))

    batcher = PooledBatcher(run, max(max_batch_tokens, max_tokens), max_queue)
    tokenizer = loaded.tokenizer
    return PooledModel(
        name=loaded.name, kind="embed", pooling=pooling, normalized=pooling != "none", dimensions=loaded.config.hidden_size,
        max_tokens=max_tokens, vocab_size=loaded.config.vocab_size, trailing_specials=0,
        encode=lambda texts: [tokenizer.encode(t) for t in texts], encode_pairs=None, batcher=batcher,
        close=batcher.close)
