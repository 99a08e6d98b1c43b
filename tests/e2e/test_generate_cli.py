"""`inferd generate` as a user runs it: a real process on the bundled model."""

from __future__ import annotations

import subprocess
import sys

import pytest


def inferd(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inferd.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_greedy_generation_on_the_bundled_model():
    # bf16 weights: the output the architecture parity tests pin against the reference implementation.
    done = inferd("generate", "--weights", "bf16", "--temperature", "0", "--max-tokens", "24", "The capital of France is")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The capital of France is the capital of the country of France.")
    assert len(done.stdout.split()) >= 20  # 24 tokens of prose after the prompt


@pytest.mark.slow
def test_seeded_sampling_repeats():
    args = ("generate", "--temperature", "1.0", "--seed", "42", "--max-tokens", "12", "Hello")
    first, second = inferd(*args), inferd(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_a_model_that_is_neither_a_path_nor_stored_is_refused_clearly(tmp_path):
    done = inferd("generate", "--model", "google/gemma-3-270m", "--data-dir", str(tmp_path), "hi", timeout=60)
    assert done.returncode == 2
    assert "is neither a local path" in done.stderr
    assert "nor in the store (stored: gemma-3-270m); `inferd pull`" in done.stderr
