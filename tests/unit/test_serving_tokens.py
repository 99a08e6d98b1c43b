"""The early refusal of prompts that cannot fit the context, before they are tokenized."""

import pytest

from inferd.http.errors import ContextSizeExceeded
from inferd.serving.tokens import check_fits


class LongestPieceOf4:
    def __init__(self):
        self.bound_asked = 0

    def fewest_tokens(self, text: str) -> int:
        self.bound_asked += 1
        return -(-len(text) // 4)


def test_a_text_no_longer_than_the_context_fits_without_asking_for_the_bound():
    tokenizer = LongestPieceOf4()
    check_fits(tokenizer, "x" * 16, context=16)
    assert tokenizer.bound_asked == 0


def test_a_longer_text_fits_while_its_fewest_tokens_do():
    tokenizer = LongestPieceOf4()
    check_fits(tokenizer, "x" * 64, context=16)
    assert tokenizer.bound_asked == 1


def test_a_text_whose_fewest_tokens_exceed_the_context_is_refused():
    with pytest.raises(ContextSizeExceeded) as refused:
        check_fits(LongestPieceOf4(), "x" * 65, context=16, param="input")
    assert str(refused.value) == ("the request exceeds the available context size: the prompt is at least 17 tokens "
                                  "(65 characters), more than the model's context of 16 tokens; shorten it")
    assert refused.value.param == "input"
