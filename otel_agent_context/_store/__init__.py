"""The bundle store (private): tables of envelopes, items, budgets, compactions and gaps."""

from ._store import DEFAULT_SQLITE_NAME, Store, StoreError, open_store

__all__ = ["DEFAULT_SQLITE_NAME", "Store", "StoreError", "open_store"]
