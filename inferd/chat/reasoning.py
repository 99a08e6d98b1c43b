"""Separating a model's reasoning (`<think>…</think>`) from its reply.

Text is split into two fields, `reasoning` and `content`, by these rules:

* Both markers are removed wherever they appear. `<think>` switches to
  reasoning and `</think>` back to content; a marker that does not change
  the mode (a second `<think>` inside reasoning, a stray `</think>` in
  content) is removed and nothing else happens.
* Text before any marker is content, unless the parser was told the prompt
  already opened thinking (`started=True`): then it is reasoning.
* A reasoning block that is never closed runs to the end of the output.
* Whitespace: DeepSeek-R1 and Qwen3 write `<think>\\n…\\n</think>\\n\\n…`.
  Those newlines are formatting, so three runs of "\\n" characters are
  dropped: the run right after either marker (and at the very start of the
  output when `started=True`), and the run right before `</think>`. Only
  "\\n" is dropped; spaces, tabs and "\\r" are kept, and so is every other
  newline (content before `<think>`, reasoning at the end of an unclosed
  block).

A field is None when it holds no text. Streaming produces the same text as
`parse` however the output is cut into deltas.
"""

from __future__ import annotations

from dataclasses import dataclass

_FORMAT_NEWLINE = "\n"


@dataclass(frozen=True)
class ThinkMarkers:
    start: str = "<think>"
    end: str = "</think>"
    start_id: int | None = None  # token ids when the markers are single tokens
    end_id: int | None = None

    def __post_init__(self):
        if not self.start or not self.end:
            raise ValueError("think markers must not be empty")
        # One marker inside the other would make a split depend on where deltas break.
        if self.start in self.end or self.end in self.start:
            raise ValueError(f"think markers {self.start!r} and {self.end!r} must not contain each other")


def think_markers(tokenizer) -> ThinkMarkers | None:
    """The markers of a model that reasons in `<think>` blocks (Qwen3, DeepSeek-R1), else None."""
    markers = ThinkMarkers()
    start_id = tokenizer.token_to_id(markers.start)
    end_id = tokenizer.token_to_id(markers.end)
    if start_id is None or end_id is None:
        return None
    return ThinkMarkers(start_id=start_id, end_id=end_id)


def think_token_ids(tokenizer) -> tuple[int, int] | None:
    """The <think> and </think> token ids, as the engine takes them (`Engine(think_ids=...)`) for
    thinking budgets; None when the model has no single-token markers."""
    markers = think_markers(tokenizer)
    return None if markers is None else (markers.start_id, markers.end_id)


def prompt_opens_thinking(prompt: str, markers: ThinkMarkers) -> bool:
    """Whether the rendered prompt ends, but for trailing whitespace, with an opening marker.

    Only the end counts: a `<think>` quoted earlier, in a user's message say,
    must not turn the whole reply into reasoning.
    """
    return prompt.rstrip().endswith(markers.start)


@dataclass
class ReasoningSplit:
    reasoning: str | None
    content: str | None


class ReasoningParser:
    """Splits one request's output into reasoning and content, whole or as it streams."""

    def __init__(self, markers: ThinkMarkers, *, started: bool = False):
        self.markers = markers
        self.started = started
        self._in_reasoning = started
        self._at_block_start = started  # formatting newlines are dropped here
        self._held = ""  # text that may still turn out to be part of a marker or of formatting
        self._longest_partial = max(len(markers.start), len(markers.end)) - 1

    def parse(self, text: str) -> ReasoningSplit:
        """Splits a complete output; leaves this parser's streaming state alone."""
        whole = ReasoningParser(self.markers, started=self.started)
        streamed, rest = whole.feed(text), whole.finish()
        return ReasoningSplit(
            reasoning=_joined(streamed.reasoning, rest.reasoning),
            content=_joined(streamed.content, rest.content),
        )

    def feed(self, delta: str) -> ReasoningSplit:
        """The reasoning and content that `delta` makes certain."""
        out = _Pieces()
        pending = self._held + delta
        while True:
            pending = self._drop_block_start_newlines(pending)
            found = self._first_marker(pending)
            if found is None:
                break
            at, marker = found
            before = pending[:at]
            if self._in_reasoning and marker == self.markers.end:
                before = before.rstrip(_FORMAT_NEWLINE)
            out.add(before, self._in_reasoning)
            self._in_reasoning = marker == self.markers.start
            self._at_block_start = True
            pending = pending[at + len(marker):]
        release = len(pending) - self._partial_marker_len(pending)
        if self._in_reasoning:
            # Newlines at the end of reasoning are dropped if `</think>` comes next.
            while release > 0 and pending[release - 1] == _FORMAT_NEWLINE:
                release -= 1
        out.add(pending[:release], self._in_reasoning)
        self._held = pending[release:]
        return out.split()

    def finish(self) -> ReasoningSplit:
        """The output has ended: what was held back is plain text after all."""
        out = _Pieces()
        out.add(self._held, self._in_reasoning)
        self._held = ""
        return out.split()

    def _drop_block_start_newlines(self, text: str) -> str:
        if not self._at_block_start:
            return text
        text = text.lstrip(_FORMAT_NEWLINE)
        if text:
            self._at_block_start = False
        return text

    def _first_marker(self, text: str) -> tuple[int, str] | None:
        hits = []
        for marker in (self.markers.start, self.markers.end):
            at = text.find(marker)
            if at >= 0:
                hits.append((at, marker))
        return min(hits, default=None)

    def _partial_marker_len(self, text: str) -> int:
        """Length of the longest tail of `text` that begins a marker."""
        for length in range(min(len(text), self._longest_partial), 0, -1):
            tail = text[-length:]
            if self.markers.start.startswith(tail) or self.markers.end.startswith(tail):
                return length
        return 0


class _Pieces:
    def __init__(self):
        self.reasoning: list[str] = []
        self.content: list[str] = []

    def add(self, text: str, is_reasoning: bool) -> None:
        if text:
            (self.reasoning if is_reasoning else self.content).append(text)

    def split(self) -> ReasoningSplit:
        return ReasoningSplit(reasoning="".join(self.reasoning) or None, content="".join(self.content) or None)


def _joined(*parts: str | None) -> str | None:
    return "".join(part for part in parts if part) or None
