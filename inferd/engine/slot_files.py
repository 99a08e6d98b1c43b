"""A slot's cache in a file and back (llama-server's /slots/{id}?action=save|restore|erase).

A slot is one of the --parallel sequences. When its request ends, the KV stays
in the prefix cache, which every slot shares, until the pool needs the blocks.
So a slot's cache is the leading full blocks of its latest sequence (prompt and
output) that are still cached:

- save writes those tokens and their K/V rows to a safetensors file: `tokens`
  int32 [n], `k` and `v` [layers, n, kv_heads, head_dim] in the cache's dtype;
  metadata: the format, the model, and the root hash the blocks chain from (a
  cache_salt's digest, never the salt itself);
- restore writes them into free blocks and registers their hashes, so the next
  prompt with that prefix takes them as cached tokens, whichever slot runs it;
- erase forgets those blocks' hashes (a block a running request holds keeps its
  hash until that request ends).

Only whole blocks are cached, so only whole blocks are saved; the rows are per
token, so a file restores into another block size. `SlotMemory` and the
functions taking an `Engine` run on the engine thread and only copy tensors and
touch the pool; `write_file` and `read_file` (encoding and file I/O) run on a
worker thread, so neither the engine nor the event loop waits for the disk.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from inferd.prefix_hash import (
    HASH_HEX_DIGITS,
    ROOT_HASH,
    BlockHash,
    prefix_block_hashes,
    root_hash,
)

if TYPE_CHECKING:
    from inferd.engine.engine import Engine
    from inferd.engine.request import Request

FORMAT = "inferd-slot/1"


class SlotFileError(ValueError):
    """A slot file that cannot be read or does not fit this server; the message says why."""


@dataclass
class SlotCache:
    """A slot's cached tokens and their K/V rows, on the CPU."""

    token_ids: list[int]
    root: BlockHash
    k: torch.Tensor  # [layers, n, kv_heads, head_dim]
    v: torch.Tensor
    model: str


@dataclass
class _Latest:
    prompt: list[int]
    output: list[int]  # the request's own list: it grows as the request generates
    salt: str | None
    root: BlockHash | None = None  # a restored file's root; else derived from the salt

    @property
    def token_ids(self) -> list[int]:
        return self.prompt + self.output

    @property
    def root_hash(self) -> BlockHash:
        return self.root if self.root is not None else root_hash(self.salt)


class SlotMemory:
    """What each slot ran last: a request, or a restored file."""

    def __init__(self) -> None:
        self._latest: dict[int, _Latest] = {}

    def bind(self, requests: list[Request]) -> None:
        """After scheduling: these requests occupy their slots now."""
        for req in requests:
            if req.slot is not None:
                latest = self._latest.get(req.slot)
                if latest is None or latest.output is not req.output_token_ids:
                    self._latest[req.slot] = _Latest(req.prompt_token_ids, req.output_token_ids, req.cache_salt)

    def content(self, slot: int) -> tuple[list[int], BlockHash]:
        latest = self._latest.get(slot)
        return ([], ROOT_HASH) if latest is None else (latest.token_ids, latest.root_hash)

    def restored(self, slot: int, token_ids: list[int], root: BlockHash) -> None:
        self._latest[slot] = _Latest(token_ids, [], None, root)

    def clear(self, slot: int) -> None:
        self._latest.pop(slot, None)


def model_identity(engine: Engine) -> str:
    """What a file must have been saved from: the weights file and how they are held."""
    return f"{Path(engine.loaded.path).name} ({engine.config.weights} weights)"


def _cached_blocks(engine: Engine, slot: int) -> tuple[list[int], list[int], BlockHash]:
    """The slot's leading cached blocks, the tokens they hold, and their root."""
    token_ids, root = engine.slot_memory.content(slot)
    bs = engine.pool.block_size
    blocks = []
    for h in prefix_block_hashes(token_ids, bs, parent=root):
        block = engine.pool.cached.get(h)
        if block is None:
            break
        blocks.append(block)
    return blocks, token_ids[: len(blocks) * bs], root


def _rows(blocks: list[int], block_size: int, device: torch.device) -> torch.Tensor:
    """The cache rows of `blocks`, in order."""
    ids = torch.tensor(blocks, dtype=torch.int64)
    return (ids[:, None] * block_size + torch.arange(block_size)[None, :]).flatten().to(device)


# -- on the engine thread ----------------------------------------------------------------------

def slot_busy(engine: Engine, slot: int) -> bool:
    return any(req.slot == slot for req in engine.scheduler.running)


def snapshot(engine: Engine, slot: int) -> SlotCache:
    """A copy of the slot's cache, to be written off the engine thread."""
    blocks, token_ids, root = _cached_blocks(engine, slot)
    caches = engine.runner.kv_caches
    rows = _rows(blocks, engine.pool.block_size, engine.runner.device)
    k = torch.stack([key.index_select(0, rows) for key, _ in caches]).cpu()
    v = torch.stack([value.index_select(0, rows) for _, value in caches]).cpu()
    return SlotCache(token_ids, root, k, v, model_identity(engine))


def install(engine: Engine, slot: int, saved: SlotCache) -> int:
    """Put a file's blocks into the prefix cache (those already cached are kept as they are);
    returns the tokens restored. Raises SlotFileError when it does not fit this server."""
    _check_fits(engine, saved)
    pool, device = engine.pool, engine.runner.device
    bs = pool.block_size
    token_ids = saved.token_ids[: len(saved.token_ids) // bs * bs]
    hashes = prefix_block_hashes(token_ids, bs, parent=saved.root)
    # Hold the blocks cached already, so allocating the others cannot evict them.
    blocks = [pool.hold(h) for h in hashes]
    missing = [i for i, block in enumerate(blocks) if block is None]
    if len(missing) > pool.num_free:
        pool.free_blocks([b for b in blocks[::-1] if b is not None])
        raise SlotFileError(f"Unable to restore slot, no available space in KV cache: the file needs {len(missing)} "
                            f"free blocks of {bs} tokens, {pool.num_free} are free; retry when fewer requests run")
    if missing:
        fresh = pool.allocate(len(missing))
        source = _rows(missing, bs, torch.device("cpu"))
        target = _rows(fresh, bs, device)
        for layer, (key, value) in enumerate(engine.runner.kv_caches):
            key.index_copy_(0, target, saved.k[layer].index_select(0, source).to(device))
            value.index_copy_(0, target, saved.v[layer].index_select(0, source).to(device))
        for i, block in zip(missing, fresh):
            blocks[i] = block
            pool.cache_block(block, hashes[i])
    pool.free_blocks(blocks[::-1])  # tail first: the prefix stays cached longest
    engine.slot_memory.restored(slot, token_ids, saved.root)
    return len(token_ids)


def erase(engine: Engine, slot: int) -> int:
    """Forget the slot's cached blocks; returns the tokens no longer cached."""
    _, token_ids, root = _cached_blocks(engine, slot)
    bs = engine.pool.block_size
    erased = engine.pool.forget(prefix_block_hashes(token_ids, bs, parent=root))
    engine.slot_memory.clear(slot)
    return erased * bs


def _check_fits(engine: Engine, saved: SlotCache) -> None:
    identity = model_identity(engine)
    if saved.model != identity:
        raise SlotFileError(f"invalid slot save file: it was saved from {saved.model}, this server runs {identity}")
    key = engine.runner.kv_caches[0][0]
    want = (len(engine.runner.kv_caches), *key.shape[1:])
    got = (saved.k.shape[0], *saved.k.shape[2:])
    if got != want or saved.k.dtype != key.dtype:
        raise SlotFileError(f"invalid slot save file: its KV rows are {list(got)} {saved.k.dtype}, this model's are "
                            f"{list(want)} {key.dtype}")
    vocab = engine.loaded.config.vocab_size
    if any(not 0 <= t < vocab for t in saved.token_ids):
        raise SlotFileError(f"invalid slot save file: a token id is outside this model's vocabulary [0, {vocab})")


# -- on a worker thread ------------------------------------------------------------------------

def write_file(path: Path, cache: SlotCache) -> int:
    """Write atomically (a reader never sees half a file); returns the bytes written."""
    tensors = {"tokens": torch.tensor(cache.token_ids, dtype=torch.int32), "k": cache.k, "v": cache.v}
    # A partial file of its own, so two saves to one name cannot write into each other's.
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(handle)
    try:
        save_file(tensors, partial, metadata={"format": FORMAT, "model": cache.model, "root": cache.root})
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
    return path.stat().st_size


def read_file(path: Path) -> tuple[SlotCache, int]:
    """The file's cache and its size in bytes. Raises SlotFileError for a missing or malformed file."""
    try:
        size = path.stat().st_size
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            names = set(f.keys())
            if meta.get("format") != FORMAT or names != {"tokens", "k", "v"}:
                raise SlotFileError(f"invalid slot save file: {path.name} is not an {FORMAT} file")
            tokens, k, v = (f.get_tensor(name) for name in ("tokens", "k", "v"))
    except FileNotFoundError:
        raise SlotFileError(f"no slot save file named {path.name} under --slot-save-path") from None
    except (SafetensorError, OSError) as error:
        raise SlotFileError(f"invalid slot save file: {path.name} cannot be read ({error})") from None
    root = meta.get("root", "")
    if (tokens.dim() != 1 or k.dim() != 4 or k.shape != v.shape or k.dtype != v.dtype
            or k.shape[1] != tokens.shape[0] or len(root) != HASH_HEX_DIGITS or root.strip("0123456789abcdef")):
        raise SlotFileError(f"invalid slot save file: {path.name} has inconsistent tensors")
    return SlotCache(tokens.tolist(), root, k, v, meta.get("model", "")), size
