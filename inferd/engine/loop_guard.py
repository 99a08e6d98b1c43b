"""Noticing when generation is stuck repeating itself.

The output ends in a loop when, for some pattern size p in
min_pattern_size..max_pattern_size, its last p * min_count tokens are min_count copies of the last p tokens. That
holds exactly when each of its last (min_count - 1) * p tokens equals the
token p places before it, so the guard keeps, per p, how many tokens in a row
have matched p back. Each new token costs one comparison per p, and only the
last max_pattern_size tokens are kept.
"""

from __future__ import annotations


class LoopGuard:
    def __init__(self, max_pattern_size: int, min_count: int, min_pattern_size: int = 1):
        if max_pattern_size < 1:
            raise ValueError(f"max_pattern_size must be at least 1, got {max_pattern_size}")
        if not 1 <= min_pattern_size <= max_pattern_size:
            raise ValueError(f"min_pattern_size must be in [1, max_pattern_size {max_pattern_size}], "
                             f"got {min_pattern_size}")
        if min_count < 2:
            # One copy of anything is not a repeat.
            raise ValueError(f"min_count must be at least 2, got {min_count}")
        self.max_pattern_size = max_pattern_size
        self.min_pattern_size = min_pattern_size  # shorter patterns are not looked for
        self.min_count = min_count
        # The last max_pattern_size tokens, in a ring: the newest at _next - 1.
        self._recent = [0] * max_pattern_size
        self._next = 0
        self._filled = 0  # how much of the ring holds tokens
        # _matched[p - 1]: how many of the latest tokens in a row equal the token p places earlier.
        self._matched = [0] * max_pattern_size
        self._needed = [(min_count - 1) * size for size in range(1, max_pattern_size + 1)]

    def add(self, token_id: int) -> bool:
        """Records the next generated token; True when the output now ends in a loop."""
        looping = False
        ring = self._recent
        for size in range(self.min_pattern_size, self._filled + 1):
            index = size - 1
            if ring[(self._next - size) % self.max_pattern_size] == token_id:
                # Capped at what a loop needs, so the counts stay bounded.
                self._matched[index] = min(self._matched[index] + 1, self._needed[index])
                looping = looping or self._matched[index] == self._needed[index]
            else:
                self._matched[index] = 0
        ring[self._next] = token_id
        self._next = (self._next + 1) % self.max_pattern_size
        self._filled = min(self._filled + 1, self.max_pattern_size)
        return looping
