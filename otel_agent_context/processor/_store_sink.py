"""The bundle store as a sink: every written bundle also lands in SQLite or PostgreSQL.

Idempotent by design (a bundle written twice replaces its own rows), so the pipeline's
replay after a crash, and the bundles JSON Lines recovery hands over at start-up, never
duplicate a row. Old envelopes are pruned at most once a minute when a retention is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from .._store import Store, StoreError, open_store
from ..exceptions import ConfigError

__all__ = ["StoreSink"]

log = logging.getLogger(__name__)

_PRUNE_EVERY = 60.0


class StoreSink:
    name = "store"

    def __init__(self, url: str, *, durable: bool = True,
                 retention: float | None = None) -> None:
        self.url = url
        self.durable = durable
        self.retention = retention
        self.store: Store | None = None
        self._pruned_at = 0.0

    def open(self) -> None:
        """Connect and migrate; a store that cannot be used is a configuration error."""
        try:
            self.store = open_store(self.url, durable=self.durable)
        except StoreError as exc:
            raise ConfigError("store.url", str(exc)) from None
        self.prune()

    @property
    def left_out(self) -> dict[str, int]:
        """Envelopes the store left out, by reason (see ``Store.write``)."""
        return self.store.left_out if self.store is not None else {}

    @property
    def opened(self) -> Store:
        if self.store is None:
            self.open()
        assert self.store is not None
        return self.store

    def write(self, batch: Sequence[tuple[tuple[str, str], dict[str, Any], bytes]],
              members: object = None) -> None:
        """``members`` is for :class:`StoreProcess`'s interface (here the bundles are whole)."""
        if self.store is None:
            self.open()
        assert self.store is not None
        self.store.write([bundle for _, bundle, _ in batch], [line for _, _, line in batch])
        self.prune()

    def prune(self) -> None:
        """Delete the envelopes past the retention, at most once a minute."""
        if self.retention is None or self.store is None:
            return
        now = time.monotonic()
        if now - self._pruned_at < _PRUNE_EVERY:
            return
        self._pruned_at = now
        try:
            removed = self.store.prune(time.time_ns() - int(self.retention * 1e9))
        except Exception:  # noqa: BLE001 - pruning is housekeeping; writing goes on
            log.warning("store: pruning old envelopes failed", exc_info=True)
            return
        if removed:
            log.info("store: pruned %d envelopes older than the retention", removed)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
