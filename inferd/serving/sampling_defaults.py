"""Sampling when a request leaves a field unset: llama-server's and Ollama's
defaults, which keep small models coherent (OpenAI's temperature 1 does not).
Every dialect and `inferd generate` take their defaults from here."""

DEFAULT_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
