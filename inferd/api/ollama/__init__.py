"""Ollama's native API (/api/chat, /api/generate, /api/tags, ...) on the one generation path."""
