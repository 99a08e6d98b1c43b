"""The OpenAI Responses API, served by converting to and from the chat path,
with responses kept in a durable store for retrieval and chaining."""
