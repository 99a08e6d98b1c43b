"""BPE merges recovered from a SentencePiece vocabulary.

SentencePiece BPE keeps no merge list: at each step it joins the adjacent pair
whose concatenation is the best-scoring piece in the vocabulary. A `tokenizers`
BPE model reproduces that when every way of cutting a piece in two (both halves
also pieces) becomes a merge, and merges are ranked by the score of the piece
they produce. User-defined pieces are matched whole by SentencePiece before any
scoring, so they rank above every scored piece.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def merge_order(token_types: np.ndarray, scores: np.ndarray) -> list[int]:
    """Ids of the pieces merges may build, best first.

    User-defined pieces come first in file order, then normal pieces by
    descending score (ties by id). Control, byte, unknown and unused pieces
    are never built by merging.
    """
    ids = np.arange(len(token_types))
    user_defined = ids[token_types == USER_DEFINED]
    normal = ids[token_types == NORMAL]
    # lexsort sorts by its last key first: descending score, then ascending id.
    normal = normal[np.lexsort((normal, -scores[normal].astype(np.float64)))]
    return [*user_defined.tolist(), *normal.tolist()]


def derive_merges(pieces: Sequence[str], order: Sequence[int]) -> list[tuple[str, str]]:
    """Every (left, right) pair that joins into a piece of `order`, ranked as `order` ranks
    the joined piece; within one piece, the split with the longer left part first.

    Only pieces listed in `order` can be a merge's halves or result.
    """
    mergeable = {pieces[token_id] for token_id in order}
    merges: list[tuple[str, str]] = []
    for token_id in order:
        piece = pieces[token_id]
        for split in range(len(piece) - 1, 0, -1):
            left, right = piece[:split], piece[split:]
            if left in mergeable and right in mergeable:
                merges.append((left, right))
    return merges
