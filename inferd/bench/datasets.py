"""The requests a benchmark sends. A session is a list of turns sent one after
another; random and shared-prefix sessions have one turn, multi-turn ones many."""

from __future__ import annotations

import random
from dataclasses import dataclass

from inferd.bench.tokenizer import TextMaker


@dataclass(frozen=True)
class Session:
    turns: tuple[str, ...]  # user text of each turn, in order
    output_len: int
    prefix: str = ""  # text every prompt of this session starts with (shared-prefix groups)

    def prompt(self, turn: int, answers: list[str]) -> str:
        """The prompt of `turn`, replaying the earlier turns and the answers they got."""
        if len(self.turns) == 1:
            return self.prefix + self.turns[0]
        history = "".join(f"User: {q}\nAssistant:{a}\n" for q, a in zip(self.turns[:turn], answers))
        return f"{self.prefix}{history}User: {self.turns[turn]}\nAssistant:"


def random_sessions(maker: TextMaker, seed: int, num_prompts: int, input_len: int, output_len: int) -> list[Session]:
    rng = random.Random(seed)
    return [Session((maker.make(rng, input_len),), output_len) for _ in range(num_prompts)]


def shared_prefix_sessions(maker: TextMaker, seed: int, groups: int, prompts_per_group: int,
                           system_prompt_len: int, question_len: int, output_len: int) -> list[Session]:
    rng = random.Random(seed)
    sessions = []
    for _ in range(groups):
        # The separator keeps the question's first token from merging with the system prompt's last.
        system = maker.make(rng, system_prompt_len) + "\n\n"
        sessions += [Session((maker.make(rng, question_len),), output_len, prefix=system)
                     for _ in range(prompts_per_group)]
    # Interleaved groups make the prefix cache hold several prefixes at once, as real traffic does.
    rng.shuffle(sessions)
    return sessions


def multi_turn_sessions(maker: TextMaker, seed: int, conversations: int, turns: int,
                        input_len: int, output_len: int) -> list[Session]:
    rng = random.Random(seed)
    return [Session(tuple(maker.make(rng, input_len) for _ in range(turns)), output_len)
            for _ in range(conversations)]
