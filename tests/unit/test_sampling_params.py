import math

import pytest

from inferd.engine.sampling_params import SamplingParams, SamplingParamsError

VOCAB = 100


def test_defaults_are_valid():
    SamplingParams().validate(VOCAB)


@pytest.mark.parametrize(
    "fields",
    [
        dict(temperature=0.0),
        dict(temperature=2.0),
        dict(top_k=-1),
        dict(top_k=0),
        dict(top_k=1000),
        dict(top_p=1.0),
        dict(top_p=1e-9),
        dict(min_p=0.0),
        dict(min_p=1.0),
        dict(repetition_penalty=0.01),
        dict(presence_penalty=-2.0, frequency_penalty=2.0),
        dict(max_tokens=None, min_tokens=50),
        dict(max_tokens=1),
        dict(max_tokens=5, min_tokens=5),
        dict(logit_bias={0: -100.0, 99: 100, 50: -math.inf}),
        dict(logit_bias={}),
        dict(seed=-3),
        dict(seed=2**70),
        dict(logprobs=0),
        dict(logprobs=20),
        dict(stop=["\n\n", "END"], stop_token_ids=[0, 99]),
    ],
)
def test_boundary_values_are_valid(fields):
    SamplingParams(**fields).validate(VOCAB)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (dict(temperature=3.0), "temperature", "temperature must be in [0, 2], got 3.0"),
        (dict(temperature=-0.1), "temperature", "temperature must be in [0, 2], got -0.1"),
        (dict(temperature=math.nan), "temperature", "temperature must be in [0, 2], got nan"),
        (dict(temperature="hot"), "temperature", "temperature must be a number, got 'hot'"),
        (dict(top_k=-2), "top_k", "top_k must be -1 or 0 (off) or a positive integer, got -2"),
        (dict(top_k=2.5), "top_k", "top_k must be an integer, got 2.5"),
        (dict(top_k=True), "top_k", "top_k must be an integer, got True"),
        (dict(top_p=0.0), "top_p", "top_p must be in (0, 1], got 0.0"),
        (dict(top_p=1.5), "top_p", "top_p must be in (0, 1], got 1.5"),
        (dict(min_p=-0.01), "min_p", "min_p must be in [0, 1], got -0.01"),
        (dict(min_p=1.01), "min_p", "min_p must be in [0, 1], got 1.01"),
        (dict(repetition_penalty=0.0), "repetition_penalty", "repetition_penalty must be in [0.001, 1000], got 0.0"),
        (
            dict(repetition_penalty=math.inf),
            "repetition_penalty",
            "repetition_penalty must be in [0.001, 1000], got inf",
        ),
        (dict(presence_penalty=2.5), "presence_penalty", "presence_penalty must be in [-2, 2], got 2.5"),
        (dict(frequency_penalty=-2.01), "frequency_penalty", "frequency_penalty must be in [-2, 2], got -2.01"),
        (dict(max_tokens=0), "max_tokens", "max_tokens must be >= 1 or None, got 0"),
        (dict(max_tokens=1.5), "max_tokens", "max_tokens must be an integer, got 1.5"),
        (dict(min_tokens=-1), "min_tokens", "min_tokens must be >= 0, got -1"),
        (dict(max_tokens=4, min_tokens=5), "min_tokens", "min_tokens must be <= max_tokens (4), got 5"),
        (
            dict(logit_bias={100: 1.0}),
            "logit_bias",
            "logit_bias token ids must be integers in [0, 100), got 100",
        ),
        (dict(logit_bias={-1: 1.0}), "logit_bias", "logit_bias token ids must be integers in [0, 100), got -1"),
        (dict(logit_bias={"5": 1.0}), "logit_bias", "logit_bias token ids must be integers in [0, 100), got '5'"),
        (dict(logit_bias={5: 101.0}), "logit_bias", "logit_bias[5] must be in [-100, 100] or -inf, got 101.0"),
        (dict(logit_bias={5: math.inf}), "logit_bias", "logit_bias[5] must be in [-100, 100] or -inf, got inf"),
        (dict(logit_bias={5: math.nan}), "logit_bias", "logit_bias[5] must be in [-100, 100] or -inf, got nan"),
        (dict(seed=1.0), "seed", "seed must be an integer, got 1.0"),
        (dict(logprobs=21), "logprobs", "logprobs must be in [0, 20] or None, got 21"),
        (dict(logprobs=-1), "logprobs", "logprobs must be in [0, 20] or None, got -1"),
        (dict(stop=[""]), "stop", "stop entries must be non-empty strings, got ''"),
        (dict(stop=[3]), "stop", "stop entries must be non-empty strings, got 3"),
        (
            dict(stop_token_ids=[1, 100]),
            "stop_token_ids",
            "stop_token_ids token ids must be integers in [0, 100), got 100",
        ),
    ],
)
def test_invalid_values_name_the_field_value_and_range(fields, field, message):
    with pytest.raises(SamplingParamsError) as caught:
        SamplingParams(**fields).validate(VOCAB)
    assert str(caught.value) == message
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("temperature", "greedy"), [(0.0, True), (0, True), (1e-6, True), (1e-300, True), (1e-4, False), (1.0, False)])
def test_greedy_means_zero_temperature(temperature, greedy):
    assert SamplingParams(temperature=temperature).greedy is greedy


# -- what one request may make the engine hold and do per token ----------------------------------

from inferd.engine.sampling_params import (  # noqa: E402
    MAX_LOOP_PATTERN_SIZE,
    MAX_STOP_STRING_LENGTH,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
)


@pytest.mark.parametrize(
    ("fields", "max_model_len"),
    [
        (dict(max_pattern_size=MAX_LOOP_PATTERN_SIZE, min_count=2), None),
        (dict(max_pattern_size=128, min_count=2), 256),  # exactly the context
        (dict(max_pattern_size=1, min_count=256), 256),
        (dict(stop=["x" * MAX_STOP_STRING_LENGTH] * MAX_STOP_STRINGS), None),
        (dict(stop_token_ids=[0] * MAX_STOP_TOKEN_IDS), None),
    ],
)
def test_sizes_at_their_bounds_are_valid(fields, max_model_len):
    SamplingParams(**fields).validate(VOCAB, max_model_len)


@pytest.mark.parametrize(
    ("fields", "max_model_len", "field", "message"),
    [
        (
            dict(max_pattern_size=10**12, min_count=2), 4096, "max_pattern_size",
            "max_pattern_size * min_count (1000000000000 * 2 = 2000000000000 tokens) must not exceed the context "
            "size 4096 (--ctx-size): a loop longer than the context can never be seen; lower max_pattern_size to "
            "at most 1024",
        ),
        (
            dict(max_pattern_size=10**7, min_count=2), 4096, "max_pattern_size",
            "lower max_pattern_size to at most 1024",
        ),
        (dict(max_pattern_size=129, min_count=2), 256, "max_pattern_size", "lower max_pattern_size to at most 128"),
        (dict(max_pattern_size=1, min_count=257), 256, "min_count", "min_count must be at most 256"),
        (dict(max_pattern_size=1, min_count=10**12), 256, "min_count", "lower min_count"),
        (
            dict(max_pattern_size=MAX_LOOP_PATTERN_SIZE + 1, min_count=2), None, "max_pattern_size",
            "max_pattern_size must be at most 1024, got 1025",
        ),
        (dict(max_pattern_size=2000, min_count=2), 10**6, "max_pattern_size", "must be at most 1024, got 2000"),
        (dict(stop=["a"] * (MAX_STOP_STRINGS + 1)), None, "stop", "at most 32 stop strings are allowed, got 33"),
        (dict(stop=["a" * (MAX_STOP_STRING_LENGTH + 1)]), None, "stop", "at most 512 characters, got one of 513"),
        (
            dict(stop_token_ids=[0] * (MAX_STOP_TOKEN_IDS + 1)), None, "stop_token_ids",
            "at most 1024 stop_token_ids are allowed, got 1025",
        ),
    ],
)
def test_sizes_past_their_bounds_name_the_field_the_limit_and_the_fix(fields, max_model_len, field, message):
    with pytest.raises(SamplingParamsError) as caught:
        SamplingParams(**fields).validate(VOCAB, max_model_len)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_the_chat_requests_loop_guard_bound_is_the_engines():
    from inferd.serving.chat_request import ChatCompletionRequest

    bound = [m.le for m in ChatCompletionRequest.model_fields["max_pattern_size"].metadata if hasattr(m, "le")]
    assert bound == [MAX_LOOP_PATTERN_SIZE]
