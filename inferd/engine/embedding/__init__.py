"""Pooled forwards: embeddings and cross-encoder scores, batched by the
engine under a token budget (`batcher.py`), computed by an encoder or a chat
model's hidden states (`forward.py`), pooled as the model says (`pooling.py`)."""
