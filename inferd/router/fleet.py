"""The fleet as this router sees it: workers by id, what each serves, which may take a request.

Discovery (static flags, etcd) adds, updates and removes workers; health
checks flip `ready` and feed breakers; the proxy asks for candidates.
Removing a worker makes the policy forget it and stops whatever was started
for it (its KV-event subscription), so nothing of it outlives it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from inferd.discovery.record import WorkerRecord
from inferd.router.breaker import CircuitBreaker
from inferd.router.policies.base import Policy
from inferd.router.worker import Worker

log = logging.getLogger(__name__)

OLLAMA_DEFAULT_TAG = ":latest"

# Started for each worker that joins (e.g. a KV-event subscription); returns its stop.
Attach = Callable[[Worker], Callable[[], None] | None]


class Fleet:
    def __init__(self, policy: Policy, breaker: Callable[[], CircuitBreaker] = CircuitBreaker,
                 attach: Attach | None = None):
        self.policy = policy
        self.workers: dict[str, Worker] = {}
        # What each worker said it serves (/v1/models), learned once by health checks.
        self.model_cards: dict[str, list[dict]] = {}
        self._new_breaker = breaker
        self._attach = attach
        self._detach: dict[str, Callable[[], None]] = {}

    # -- membership ------------------------------------------------------------
    def upsert(self, record: WorkerRecord, source: str) -> Worker:
        """Add the worker, or update what it says about itself. A new URL is a
        new process: its cache is empty and its breaker starts closed."""
        current = self.workers.get(record.id)
        if current is not None and current.url == record.url.rstrip("/"):
            current.model = record.model or current.model
            current.parallel = record.parallel
            current.block_size = record.block_size
            current.capabilities = frozenset(record.capabilities)
            current.source = source
            return current
        if current is not None:
            self.remove(record.id)
        worker = Worker(
            id=record.id, url=record.url.rstrip("/"), model=record.model, parallel=record.parallel,
            block_size=record.block_size, capabilities=frozenset(record.capabilities), source=source,
            breaker=self._new_breaker(),
        )
        self.workers[worker.id] = worker
        if self._attach is not None:
            stop = self._attach(worker)
            if stop is not None:
                self._detach[worker.id] = stop
        log.info("worker %s joined (%s, model %s, from %s)", worker.id, worker.url, worker.model or "unknown", source)
        return worker

    def remove(self, worker_id: str) -> Worker | None:
        worker = self.workers.pop(worker_id, None)
        if worker is None:
            return None
        self.model_cards.pop(worker_id, None)
        stop = self._detach.pop(worker_id, None)
        if stop is not None:
            stop()
        self.policy.on_worker_removed(worker_id)
        log.info("worker %s left (%s)", worker_id, worker.url)
        return worker

    def retain(self, source: str, ids: Iterable[str]) -> None:
        """Remove the workers from `source` not in `ids` (after a resync)."""
        keep = set(ids)
        for worker in list(self.workers.values()):
            if worker.source == source and worker.id not in keep:
                self.remove(worker.id)

    def get(self, worker_id: str) -> Worker | None:
        return self.workers.get(worker_id)

    # -- what it serves --------------------------------------------------------
    def names(self, worker: Worker) -> set[str]:
        names = {card["id"] for card in self.model_cards.get(worker.id, ()) if isinstance(card.get("id"), str)}
        return names | ({worker.model} if worker.model else set())

    def answers_to(self, worker: Worker) -> set[str]:
        """Every name a request may give it: the models' ids and their aliases (a card's `aliases`)."""
        aliases = {alias for card in self.model_cards.get(worker.id, ()) for alias in _aliases(card)}
        return self.names(worker) | aliases

    def has_loaded(self, worker: Worker, model: str) -> bool:
        """It holds `model` in memory now: a request there starts without a load."""
        wanted = {model, model.removesuffix(OLLAMA_DEFAULT_TAG)}
        cards = [card for card in self.model_cards.get(worker.id, ()) if {card.get("id"), *_aliases(card)} & wanted]
        if cards:  # what it said last: even its own model may have been unloaded (Ollama's keep_alive 0)
            return any(card.get("loaded", True) is not False for card in cards)
        return worker.model in wanted

    def serves(self, worker: Worker, model: str) -> bool:
        names = self.answers_to(worker)
        return model in names or model.removesuffix(OLLAMA_DEFAULT_TAG) in names

    def served_models(self) -> list[str]:
        seen: dict[str, None] = {}
        for worker in self.workers.values():
            for name in sorted(self.names(worker)):
                seen.setdefault(name)
        return list(seen)

    # -- who may take a request ------------------------------------------------
    def routable(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.routable]

    def healthy(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.healthy]

    def candidates(self, model: str | None, exclude: Iterable[str] = ()) -> list[Worker]:
        """Routable workers that serve `model` (one of unknown model takes any),
        only those that have it loaded when any has. A name no worker serves goes
        to any worker, which answers its own 404; a served name whose workers are
        all down gets none (the router's 503)."""
        skip = set(exclude)
        routable = [w for w in self.workers.values() if w.id not in skip and w.routable]
        if not model or not any(self.serves(w, model) for w in self.workers.values()):
            return routable
        serving = [w for w in routable if w.model is None or self.serves(w, model)]
        if any(w.model is not None and self.has_loaded(w, model) for w in serving):  # no load to wait for there
            return [w for w in serving if w.model is None or self.has_loaded(w, model)]
        return serving


def _aliases(card: dict) -> list[str]:
    aliases = card.get("aliases")
    return [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []
