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
        (dict(repetition_penalty=0.0), "repetition_penalty", "repetition_penalty must be a finite number > 0, got 0.0"),
        (
            dict(repetition_penalty=math.inf),
            "repetition_penalty",
            "repetition_penalty must be a finite number > 0, got inf",
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
