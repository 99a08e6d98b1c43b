"""llama-server's native dialect: its routes at the root, OpenAI's error envelope."""

from __future__ import annotations

from inferd.api.openai.dialect import completion_text
from inferd.http.dialect import Dialect, Endpoint

PATHS = ("/completion", "/infill", "/tokenize", "/detokenize", "/apply-template", "/slots", "/props")

DIALECT = Dialect(
    name="llamacpp",
    routes="inferd.api.llamacpp.routes",
    path_prefixes=PATHS,
    endpoints=(
        Endpoint("/completion", routing_text=completion_text, token_prompt=True),
        *(Endpoint(p) for p in ("/infill", "/tokenize", "/detokenize", "/apply-template")),
    ),
)
