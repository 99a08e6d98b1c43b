"""Prefix-cache block hashes, shared by the engine's block pool, its KV
events and the router's precise policy, which must all agree on them.

A full block's hash covers its tokens and, through its parent's hash, every
token before it:

    hash = sha256(parent hash (16 bytes) || tokens as little-endian uint32)[:16]

written as 32 lowercase hex digits (JSON carries them without loss). The
first block's parent is the root: 16 zero bytes, or for a request with a
`cache_salt` a digest of the salt, so requests with different salts never
share a block. The bytes hashed depend only on the token ids, never on the
Python build or process. SHA-256 rather than a faster non-cryptographic
hash: a collision would hand one request another's cached KV, so it must not
be possible to craft one.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

BlockHash = str  # 32 lowercase hex digits
HASH_BYTES = 16
HASH_HEX_DIGITS = 2 * HASH_BYTES

# The parent of an unsalted request's first block.
ROOT_HASH: BlockHash = bytes(HASH_BYTES).hex()

# Sets a salt's root apart from block hashes, whose input starts with a parent hash instead.
_SALT_DOMAIN = b"inferd cache_salt\x00"


def root_hash(cache_salt: str | None) -> BlockHash:
    """The parent of a request's first block; None or "" means no salt."""
    if not cache_salt:
        return ROOT_HASH
    # surrogatepass: JSON can carry a lone surrogate, and any salt must hash.
    salt = cache_salt.encode("utf-8", "surrogatepass")
    return hashlib.sha256(_SALT_DOMAIN + salt).digest()[:HASH_BYTES].hex()


def prefix_block_hashes(
    token_ids: Sequence[int], block_size: int, start: int = 0, parent: BlockHash = ROOT_HASH
) -> list[BlockHash]:
    """Hashes of the full blocks of `token_ids` from block index `start`;
    `parent` is the hash of block `start - 1` (a root when `start` is 0).
    Raises ValueError for a token id outside [0, 2**32)."""
    end = len(token_ids) // block_size
    if start >= end:
        return []
    # One pack for all the blocks; each block is then a slice of it.
    first = start * block_size
    try:
        packed = struct.pack(f"<{(end - start) * block_size}I", *token_ids[first : end * block_size])
    except struct.error:
        raise ValueError("token ids must be integers in [0, 2**32)") from None
    step = 4 * block_size
    digest = bytes.fromhex(parent)
    hashes = []
    for offset in range(0, len(packed), step):
        digest = hashlib.sha256(digest + packed[offset : offset + step]).digest()[:HASH_BYTES]
        hashes.append(digest.hex())
    return hashes
