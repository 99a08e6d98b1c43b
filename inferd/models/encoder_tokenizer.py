"""An encoder's tokenizer: tokenizer.json with its own special tokens
([CLS] text [SEP], and [CLS] query [SEP] document [SEP] with segment ids for
pairs), its saved truncation and padding turned off: lengths are checked, and
truncated only where a request asks for it (`truncated`, `truncated_pair`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import tokenizers

from inferd.models.tokenizer import InvalidTextError, TokenizerLoadError


class EncoderTokenizer:
    def __init__(self, inner: tokenizers.Tokenizer):
        inner.no_truncation()
        inner.no_padding()
        self.inner = inner
        self.vocab_size = inner.get_vocab_size(with_added_tokens=True)
        # Special tokens after the text ([SEP]): a truncated input keeps them.
        mask = inner.encode("a").special_tokens_mask
        self.trailing_specials = len(mask) - len("".join(map(str, mask)).rstrip("1"))

    @classmethod
    def from_folder(cls, folder: Path) -> "EncoderTokenizer":
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise TokenizerLoadError(f"{folder} has no tokenizer.json; an encoder needs its fast-tokenizer file")
        try:
            return cls(tokenizers.Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a bare Exception
            raise TokenizerLoadError(f"{path} cannot be read: {error}") from error

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, special tokens included (one batch call: parallel, the GIL released)."""
        return [e.ids for e in self._batch(list(texts))]

    def encode_pairs(self, query: str, documents: Sequence[str]) -> list[tuple[list[int], list[int], list[int | None]]]:
        """(ids, segment ids, sequence ids) of each (query, document) pair."""
        return [(e.ids, e.type_ids, e.sequence_ids) for e in self._batch([(query, d) for d in documents])]

    def _batch(self, items: list) -> list[tokenizers.Encoding]:
        try:
            return self.inner.encode_batch(items)
        except TypeError:
            raise InvalidTextError("the text contains an unpaired UTF-16 surrogate or is not text; send valid Unicode") from None


def truncated(ids: list[int], limit: int, trailing_specials: int) -> list[int]:
    """The first `limit` tokens, keeping the trailing special tokens ([SEP]) last."""
    if len(ids) <= limit:
        return ids
    keep = limit - trailing_specials
    return ids[:keep] + (ids[-trailing_specials:] if trailing_specials else [])


def truncated_pair(ids: list[int], type_ids: list[int], sequence_ids: list[int | None],
                   limit: int) -> tuple[list[int], list[int]] | None:
    """A (query, document) pair cut to `limit` tokens from the end of its
    document; None when even an empty document would not fit."""
    over = len(ids) - limit
    if over <= 0:
        return ids, type_ids
    document = [i for i, seq in enumerate(sequence_ids) if seq == 1]
    if over >= len(document):
        return None
    drop = set(document[-over:])
    return ([t for i, t in enumerate(ids) if i not in drop], [t for i, t in enumerate(type_ids) if i not in drop])
