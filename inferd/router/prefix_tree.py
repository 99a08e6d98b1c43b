"""An approximate prefix tree over request text, shared by all workers.

The router cannot see a worker's KV cache, so it remembers what it sent
where: every routed prompt's text is inserted for the worker that got it,
and a new prompt is matched against the tree to find who most likely still
holds its prefix. It is approximate on purpose (characters, not tokens; the
worker may have evicted what the tree remembers), which costs a cache miss
at worst, never a wrong answer.

Shape: a radix tree whose edges carry text. Each node records the workers
that were sent a prompt through it and when (a logical clock, one tick per
insert). A worker that holds a node holds every node above it, so a
worker's match is the depth of the deepest node on the path that names it.

Size: each worker may hold at most `max_chars` characters (the lengths of the
edges it is named on; shared edges count for each worker). Past that its
least recently used leaves are dropped until it fits again; a node no
worker holds leaves the tree. Leaves are found through a per-worker heap
with lazy deletion: entries go stale when a node is touched again or gains
a child for that worker, and are skipped when popped.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

# ~4 characters a token: 2M characters is ~500k tokens, the KV pool of the
# largest worker we expect (--parallel 16 x 32k context). Remembering more
# than a worker can hold costs little (a "hit" that misses would have missed
# on any worker); remembering less throws away hits that are real.
DEFAULT_MAX_CHARS = 2_000_000


class _Node:
    __slots__ = ("text", "parent", "children", "workers")

    def __init__(self, text: str, parent: _Node | None):
        self.text = text  # the edge from the parent
        self.parent = parent
        self.children: dict[str, _Node] = {}  # by first character
        self.workers: dict[str, int] = {}  # worker id -> last access tick


@dataclass(frozen=True)
class PrefixMatch:
    matched: int  # the longest prefix of the text that any worker holds
    workers: dict[str, int]  # worker id -> how many leading characters it holds


def common_prefix_len(a: str, b: str) -> int:
    """Binary search over slice compares: C speed on long prompts."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class PrefixTree:
    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS):
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {max_chars}")
        self.max_chars = max_chars
        self._root = _Node("", None)
        self._clock = 0
        self._chars: dict[str, int] = {}
        self._nodes: dict[str, int] = {}
        self._lru: dict[str, list[tuple[int, int, _Node]]] = {}
        self._seq = itertools.count()  # heap tie-break; nodes never compare

    def insert(self, text: str, worker_id: str) -> None:
        """Record that `worker_id` was sent `text` (only its first `max_chars` characters)."""
        rest = text[: self.max_chars]
        if not rest:
            return
        self._clock += 1
        node = self._root
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                child = _Node(rest, node)
                node.children[rest[0]] = child
            common = common_prefix_len(child.text, rest)
            if common < len(child.text):
                child = self._split(child, common)
            self._touch(child, worker_id)
            node, rest = child, rest[common:]
        self._push(worker_id, node)
        self._evict(worker_id)
        if len(self._lru[worker_id]) > 2 * self._nodes.get(worker_id, 0) + 64:
            self._rebuild_lru(worker_id)

    def match(self, text: str) -> PrefixMatch:
        """How much of `text` each worker holds; changes nothing."""
        held: dict[str, int] = {}
        node, rest, depth = self._root, text, 0
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                break
            common = common_prefix_len(child.text, rest)
            depth += common
            for worker_id in child.workers:
                held[worker_id] = depth
            if common < len(child.text):
                break
            node, rest = child, rest[common:]
        return PrefixMatch(max(held.values(), default=0), held)

    def remove_worker(self, worker_id: str) -> None:
        for node in reversed(self._held(worker_id)):  # children before their parents
            self._drop(node, worker_id)
        for table in (self._chars, self._nodes, self._lru):
            table.pop(worker_id, None)

    def chars(self, worker_id: str) -> int:
        return self._chars.get(worker_id, 0)

    def workers(self) -> list[str]:
        return sorted(w for w, n in self._chars.items() if n > 0)

    def view(self, worker_id: str, limit: int = 8, preview: int = 80) -> dict:
        """What `worker_id` holds: totals and its most recently used prompts."""
        leaves = [n for n in self._held(worker_id) if not self._holds_below(n, worker_id)]
        leaves.sort(key=lambda n: n.workers[worker_id], reverse=True)
        recent = []
        for leaf in leaves[:limit]:
            text = self._text_of(leaf)
            recent.append({"prefix": text[:preview], "chars": len(text), "last_access": leaf.workers[worker_id]})
        return {
            "chars": self.chars(worker_id),
            "nodes": self._nodes.get(worker_id, 0),
            "max_chars": self.max_chars,
            "prompts": len(leaves),
            "recent": recent,
        }

    # -- internals ---------------------------------------------------------

    def _touch(self, node: _Node, worker_id: str) -> None:
        if worker_id not in node.workers:
            self._chars[worker_id] = self._chars.get(worker_id, 0) + len(node.text)
            self._nodes[worker_id] = self._nodes.get(worker_id, 0) + 1
        node.workers[worker_id] = self._clock

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge at `at`; a new node takes the first part and its workers."""
        head = _Node(node.text[:at], node.parent)
        head.workers = dict(node.workers)
        node.parent.children[head.text[0]] = head
        node.text, node.parent = node.text[at:], head
        head.children[node.text[0]] = node
        for worker_id in head.workers:
            self._nodes[worker_id] += 1
        return head

    def _drop(self, node: _Node, worker_id: str) -> None:
        del node.workers[worker_id]
        self._chars[worker_id] -= len(node.text)
        self._nodes[worker_id] -= 1
        if not node.workers:  # nobody holds it, so nobody holds anything below it
            del node.parent.children[node.text[0]]
            node.parent = None

    def _holds_below(self, node: _Node, worker_id: str) -> bool:
        return any(worker_id in c.workers for c in node.children.values())

    def _push(self, worker_id: str, node: _Node) -> None:
        heapq.heappush(self._lru.setdefault(worker_id, []), (node.workers[worker_id], next(self._seq), node))

    def _evict(self, worker_id: str) -> None:
        heap = self._lru[worker_id]
        while self._chars[worker_id] > self.max_chars and heap:
            tick, _, node = heapq.heappop(heap)
            if node.workers.get(worker_id) != tick or self._holds_below(node, worker_id):
                continue  # stale: touched since, dropped, or no longer a leaf for this worker
            parent = node.parent
            self._drop(node, worker_id)
            if worker_id in parent.workers and not self._holds_below(parent, worker_id):
                self._push(worker_id, parent)

    def _held(self, worker_id: str) -> list[_Node]:
        """The nodes naming `worker_id`, each after its parent."""
        held, stack = [], [self._root]
        while stack:
            below = [c for c in stack.pop().children.values() if worker_id in c.workers]
            held.extend(below)
            stack.extend(below)
        return held

    def _rebuild_lru(self, worker_id: str) -> None:
        heap = [
            (n.workers[worker_id], next(self._seq), n)
            for n in self._held(worker_id)
            if not self._holds_below(n, worker_id)
        ]
        heapq.heapify(heap)
        self._lru[worker_id] = heap

    def _text_of(self, node: _Node) -> str:
        parts = []
        while node is not None:
            parts.append(node.text)
            node = node.parent
        return "".join(reversed(parts))
