"""Keys edited in the store by another process (`inferd keys add|rm|rotate
--data-dir` beside a running server) take effect without a restart: a thread
asks SQLite every POLL_SECONDS whether anyone else has committed to the file
(`PRAGMA data_version`, a read of the file's change counter, no query), and
if so the key ring takes the stored keys as they are. A revoked or rotated
secret stops working within POLL_SECONDS."""

from __future__ import annotations

import logging
import threading

from inferd.tenants.keyring import KeyRing

log = logging.getLogger("inferd.tenants")

POLL_SECONDS = 0.25


class StoreWatch:
    def __init__(self, ring: KeyRing, interval: float = POLL_SECONDS):
        self.ring = ring
        self.interval = interval
        self._stop = threading.Event()
        self._version = ring.store.data_version()
        self._thread = threading.Thread(target=self._run, name="inferd-key-store-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:  # a store briefly locked or gone: try again next time
                log.exception("reading the key store %s for changes failed", self.ring.store.path)

    def check(self) -> None:
        version = self.ring.store.data_version()
        if version == self._version:
            return
        self._version = version
        for name, key in self.ring.reload():
            log.info("API key %r %s in %s by another process", name, "removed" if key is None else "changed",
                     self.ring.store.path)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Ends the thread and waits for it (again: nothing)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
