"""The OpenAI dialect: chat completions, completions, embeddings, models."""

from __future__ import annotations

from collections.abc import Mapping

from inferd.api.prompt_text import chat_messages_text, first_prompt_text, prompt_text
from inferd.http.dialect import Dialect, Endpoint, PromptRenderer
from inferd.serving.chat_request import ChatCompletionRequest


def both(path: str) -> tuple[str, str]:
    """OpenAI clients call with or without the /v1 prefix."""
    return (f"/v1{path}", path)


def chat_prompt_ids(renderer: PromptRenderer, body: Mapping) -> list[int]:
    return renderer.chat(ChatCompletionRequest.model_validate(body))


def completion_prompt_ids(renderer: PromptRenderer, body: Mapping) -> list[int] | None:
    text = first_prompt_text(body)
    return renderer.encode(text) if text is not None else None


def completion_text(body: Mapping) -> str:
    return prompt_text(body.get("prompt"))


def embedding_text(body: Mapping) -> str:
    return prompt_text(body.get("input"))


# Files, batches and jobs are kept by the worker that took them (the router must send their reads there).
JOB_ENDPOINTS = (
    Endpoint("/v1/files", methods=("GET", "POST"), upload_limit="max_file_size", stores_response=True),
    Endpoint("/v1/files/{file_id}", methods=("GET", "DELETE")),
    Endpoint("/v1/files/{file_id}/content", methods=("GET",)),
    Endpoint("/v1/batches", methods=("GET", "POST"), stores_response=True),
    Endpoint("/v1/batches/{batch_id}", methods=("GET",), stores_response=True),  # names its output files
    Endpoint("/v1/batches/{batch_id}/cancel"),
    Endpoint("/v1/jobs", methods=("GET",)),
    Endpoint("/v1/jobs/{job_id}", methods=("GET",)),
    Endpoint("/v1/jobs/{job_id}/cancel"),
    Endpoint("/v1/jobs/{job_id}/events", methods=("GET",)),
)

DIALECT = Dialect(
    name="openai",
    routes="inferd.api.openai.routes",
    # /completions without /v1 is llama-server's native completion (api/llamacpp).
    path_prefixes=(*both("/chat/completions"), "/v1/completions", *both("/models"), "/v1/embeddings",
                   "/v1/files", "/v1/batches", "/v1/jobs"),
    endpoints=(
        *(Endpoint(p, routing_text=chat_messages_text, prompt_ids=chat_prompt_ids) for p in both("/chat/completions")),
        Endpoint("/v1/completions", routing_text=completion_text, prompt_ids=completion_prompt_ids,
                 token_prompt=True),
        Endpoint("/v1/embeddings", routing_text=embedding_text),
        *(Endpoint(f"{p}/input_tokens", routing_text=chat_messages_text) for p in both("/chat/completions")),
        *JOB_ENDPOINTS,
    ),
)
