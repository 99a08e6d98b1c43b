"""One request's steering of its next token: once the thinking budget is
spent the next token is forced to be </think>; outside reasoning, the
grammar says which tokens may come next. Reasoning tokens are never shown
to the grammar."""

from __future__ import annotations

from inferd.engine.sampling.grammar_mask import GrammarConstraint
from inferd.engine.sampling.thinking_budget import ThinkingBudget


class Steering:
    def __init__(self, constraint: GrammarConstraint | None = None, thinking: ThinkingBudget | None = None):
        self.constraint = constraint
        self.thinking = thinking

    def forced_token(self) -> int | None:
        """The token the next step must produce, if any."""
        return self.thinking.forced_token() if self.thinking is not None else None

    @property
    def grammar(self) -> GrammarConstraint | None:
        """The grammar that masks the next token: none inside reasoning."""
        if self.thinking is not None and self.thinking.in_reasoning:
            return None
        return self.constraint

    def advance(self, token: int) -> bool:
        """Record the sampled token; True when the grammar is complete (the output ends).
        Raises ValueError when the grammar stopped on a parser limit rather than completing."""
        grammar = self.grammar  # before the token: a </think> ends reasoning, it is not grammar output
        if self.thinking is not None:
            self.thinking.add(token)
        if grammar is None:
            return False
        grammar.accept(token)
        if grammar.finished and grammar.error:
            raise ValueError(grammar.error)
        return grammar.finished
