"""The bundled all-MiniLM-L6-v2 in inferd against sentence-transformers: 200
varied sentences (cosine >= 0.9999 each, float32), through the real path (the
tokenizer, inputs past the limit truncated as sentence-transformers does,
the batcher's padded batches); and batch invariance: a sentence embedded
alone and among 31 others gives the same vector."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
from inferd.config import ServeConfig
from inferd.server.assemble import new_state
from inferd.server.pooled_models import load_encoder_model
from inferd.serving.embeddings import embed

WORDS = ("the quick brown fox jumps over lazy dog cat sat on mat inference server batches tokens under a budget "
         "Paris is capital of France Berlin Germany 2026 3.14 42 naïve café résumé Über straße 東京 北京 日本語 😀 🚀 "
         "don't can't it's e-mail C++ x_y <tag> {json: 1} #hashtag @user http://example.com/a?b=c").split()


def sentences(n: int = 200, seed: int = 20) -> list[str]:
    """Deterministic and varied: 1 to 24 words, mixed case, punctuation, digits,
    accents, CJK and emoji; every hundredth one past the 256-token limit."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        count = 300 if i % 100 == 99 else rng.randint(1, 24)
        words = [rng.choice(WORDS) for _ in range(count)]
        words = [w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w for w in words]
        out.append(" ".join(words) + rng.choice(("", ".", "?", "!", " ...")))
    return out


@pytest.fixture(scope="module")
def minilm():
    state = new_state(ServeConfig(embedding_dtype="float32"), "minilm")
    load_encoder_model(state, "all-minilm-l6-v2")
    state.served.loaded = True
    yield state
    state.served.close()


@pytest.mark.slow  # loading sentence-transformers is most of its cost
def test_minilm_matches_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    from tiny_encoders import minilm_folder

    texts = sentences()
    reference = st.SentenceTransformer(str(minilm_folder()), device="cpu").encode(texts, batch_size=64)
    got = asyncio.run(embed(minilm, None, texts, truncate=True))
    assert got.model == "all-minilm-l6-v2"
    vectors = np.stack(got.vectors)
    assert vectors.shape == (200, 384) and vectors.dtype == np.float32
    cosine = (vectors * reference).sum(1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.9999, (cosine.argmin(), cosine.min())
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_sentence_alone_and_among_31_others_gets_the_same_vector(minilm):
    texts = sentences(32, seed=7)
    target = texts[5]

    async def both():
        alone = await embed(minilm, None, [target], truncate=True)
        among = await embed(minilm, None, texts, truncate=True)
        return alone.vectors[0], among.vectors[5]

    batches = minilm.served.named("all-minilm-l6-v2").pooled.batcher.batches
    alone, among = asyncio.run(both())
    assert minilm.served.named("all-minilm-l6-v2").pooled.batcher.batches == batches + 2  # the 32 ran as one batch
    np.testing.assert_allclose(alone, among, atol=2e-6, rtol=0)
