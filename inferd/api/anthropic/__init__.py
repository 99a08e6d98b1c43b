"""The Anthropic Messages API, served by converting to and from the chat path."""
