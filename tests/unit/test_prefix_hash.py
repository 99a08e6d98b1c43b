"""Prefix-cache block hashes: stable across processes and builds, 128 bits
over the token bytes, salted at the root, and collision-free on an
exhaustive set of small prompts."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import struct
import subprocess
import sys

import pytest

from inferd.prefix_hash import HASH_HEX_DIGITS, ROOT_HASH, prefix_block_hashes, root_hash

TOKENS = [1, 2, 3, 4, 5, 6, 7, 8]
# Written down once: a change here means every router and cache disagrees with older workers.
GOLDEN = ["3a60ee17b8d4f5b7d56818719a9b6674", "e2a36f314815bd416651c87d7307f7cc"]
GOLDEN_SALTED = ["2ba197751a3c5492e49508722c59ca93", "9b4be22c1c10fbc817f6fa29c1e78e4f"]


def test_golden_values():
    assert prefix_block_hashes(TOKENS, 4) == GOLDEN
    assert prefix_block_hashes(TOKENS, 4, parent=root_hash("tenant-a")) == GOLDEN_SALTED


def test_the_definition_sha256_of_parent_and_little_endian_uint32_tokens():
    parent, expected = bytes(16), []
    for block in (TOKENS[:4], TOKENS[4:]):
        parent = hashlib.sha256(parent + struct.pack("<4I", *block)).digest()[:16]
        expected.append(parent.hex())
    assert expected == GOLDEN
    assert ROOT_HASH == "0" * HASH_HEX_DIGITS


def test_stable_across_processes_and_hash_seeds():
    script = (
        "import json; from inferd.prefix_hash import prefix_block_hashes, root_hash; "
        f"print(json.dumps([prefix_block_hashes({TOKENS}, 4), "
        f"prefix_block_hashes({TOKENS}, 4, parent=root_hash('tenant-a'))]))"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == [GOLDEN, GOLDEN_SALTED]


def test_hashes_are_128_bit_lowercase_hex():
    for h in prefix_block_hashes(list(range(64)), 16) + [root_hash("x")]:
        assert len(h) == HASH_HEX_DIGITS and int(h, 16) < 2**128 and h == h.lower()


def test_a_chain_continues_from_any_block():
    whole = prefix_block_hashes(list(range(40)), 4)
    assert len(whole) == 10  # full blocks only
    assert prefix_block_hashes(list(range(40)), 4, start=6, parent=whole[5]) == whole[6:]
    assert prefix_block_hashes(list(range(24, 40)), 4, parent=whole[5]) == whole[6:]
    assert prefix_block_hashes([1, 2, 3], 4) == [] and prefix_block_hashes(list(range(8)), 4, start=2) == []


def test_a_salt_changes_the_first_and_so_every_block_hash():
    plain = prefix_block_hashes(list(range(64)), 4)
    salted = prefix_block_hashes(list(range(64)), 4, parent=root_hash("tenant-a"))
    other = prefix_block_hashes(list(range(64)), 4, parent=root_hash("tenant-b"))
    assert not set(plain) & set(salted) and not set(salted) & set(other) and not set(plain) & set(other)
    assert root_hash(None) == root_hash("") == ROOT_HASH
    assert root_hash("tenant-a") == root_hash("tenant-a") != ROOT_HASH
    assert root_hash("\ud800") != ROOT_HASH  # a lone surrogate, as JSON may carry, still hashes


def test_no_collisions_over_every_small_prompt():
    # Ids that catch byte-packing mistakes (0, byte and 16-bit boundaries, the largest id)
    # in chains of one and two blocks of 2, and every one- and two-token prompt over 64 ids
    # cut into blocks of 1 and of 2: the same tokens in other blocks must hash apart too.
    edges = [0, 1, 2, 255, 256, 65535, 65536, 2**32 - 1]
    prompts = {(2, p) for n in (2, 4) for p in itertools.product(edges, repeat=n)}
    prompts |= {(1, p) for n in (1, 2) for p in itertools.product(range(64), repeat=n)}
    prompts |= {(2, p) for p in itertools.product(range(64), repeat=2)}
    hashes = {prefix_block_hashes(p, size)[-1] for size, p in prompts}
    assert len(hashes) == len(prompts) > 12_000


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5])
def test_token_ids_outside_uint32_are_refused(bad):
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        prefix_block_hashes([1, bad], 2)


def test_importing_it_pulls_in_neither_torch_nor_the_engine():
    script = (
        "import json, sys, inferd.prefix_hash; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('inferd.'))))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["inferd.prefix_hash"]
