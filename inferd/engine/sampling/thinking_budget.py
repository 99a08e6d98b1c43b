"""Tracks whether a request is inside <think>…</think>, and caps how many
tokens it may spend there: once the budget is spent, the next token is
forced to be </think>. Grammars apply only outside reasoning."""

from __future__ import annotations


class ThinkingBudget:
    def __init__(self, start_id: int, end_id: int, budget: int | None = None, started: bool = False):
        self.start_id = start_id
        self.end_id = end_id
        self.budget = budget  # None = unlimited
        self.in_reasoning = started  # the prompt itself may have opened <think>
        self.spent = 0

    def forced_token(self) -> int | None:
        """The token the next step must produce, if any."""
        if self.budget is not None and self.in_reasoning and self.spent >= self.budget:
            return self.end_id
        return None

    def add(self, token_id: int) -> None:
        if token_id == self.start_id and not self.in_reasoning:
            self.in_reasoning = True
        elif token_id == self.end_id:
            self.in_reasoning = False
        elif self.in_reasoning:
            self.spent += 1
