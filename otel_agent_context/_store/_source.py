"""Where the readers (``timeline --session``, ``query``) find bundles: a store URL, a
SQLite file, ``serve``'s output directory (its ``context.db``), or JSON Lines files, which
are loaded into an in-memory store so every question is answered by the same SQL."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ._store import DEFAULT_SQLITE_NAME, Store, StoreError, open_store

__all__ = ["bundle_lines", "is_sqlite_file", "open_source"]

_SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite_file(source: str | Path) -> bool:
    """Whether ``source`` is a regular file holding a SQLite database (by its header, so a
    store under any name is recognised and a bundles file named ``.db`` is not)."""
    if not os.path.isfile(source):  # a FIFO would be waited on; the readers refuse it
        return False
    try:
        with open(source, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def open_source(source: str, *, warn: Any = None) -> Store:
    """A store to read from; raises StoreError with a message for a person."""
    if source.startswith(("postgresql://", "postgres://", "sqlite:///")):
        return open_store(source, durable=False)
    path = Path(source)
    if source != "-" and not path.exists():
        raise StoreError(f"{source}: no such file, directory or store")
    if source != "-" and not path.is_dir() and not path.is_file():
        # a FIFO or a device would be waited on (or read) for ever
        raise StoreError(f"{source}: not a regular file")
    if path.is_dir() and (path / DEFAULT_SQLITE_NAME).is_file():
        return open_store(str(path / DEFAULT_SQLITE_NAME), durable=False, read_only=True)
    if is_sqlite_file(path):
        return open_store(str(path), durable=False, read_only=True)
    store = open_store(":memory:", durable=False)
    bad = 0
    batch: list[dict[str, Any]] = []
    for name, number, line in bundle_lines(source):
        if not line.strip():
            continue
        try:
            bundle = orjson.loads(line)
            if not isinstance(bundle, dict) or not isinstance(
                    bundle.get("context_envelope"), dict):
                raise ValueError
        except ValueError:
            bad += 1
            if warn is not None and bad <= 3:
                warn(f"{name}:{number}: not a bundle, skipped")
            continue
        batch.append(bundle)
        if len(batch) >= 500:
            store.write(batch)
            batch = []
    store.write(batch)
    return store


def bundle_lines(source: str) -> Iterator[tuple[str, int, bytes]]:
    """Each line of a bundles JSON Lines source (a file, a directory of them, or ``-``) with
    its file name and line number; StoreError for a source that is missing or not a regular
    file (a FIFO would be waited on for ever) or cannot be read."""
    if source == "-":
        for number, line in enumerate(sys.stdin.buffer, 1):
            yield "<stdin>", number, line
        return
    path = Path(source)
    if not path.exists():
        raise StoreError(f"{source}: no such file or directory")
    files = (sorted(path.glob("bundles-*.jsonl")) or sorted(path.glob("*.jsonl"))
             if path.is_dir() else [path])
    for file in files:
        if not file.is_file():
            raise StoreError(f"{file}: not a regular file")
        try:
            with open(file, "rb") as handle:
                for number, line in enumerate(handle, 1):
                    yield str(file), number, line
        except OSError as exc:
            raise StoreError(f"{file}: {exc.strerror}") from None
