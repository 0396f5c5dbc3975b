"""History files read with bounded memory and incrementally (issue 13): a watcher that looks
again after an append reads the appended bytes (and the first and last 4 KiB it had), not the
whole file; a rewrite is still found (head or tail at once, anywhere within
FULL_CHECK_EVERY); what it reports is what a fresh reading reports."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from otel_agent_context.adapters import _abi, _abi_reader, _abi_rules, read_session


def _line(n: int, size: int = 2000) -> bytes:
    body = f'{{"id":"msg-{n}","role":"user","content":"{"x" * size}","tokens":{size // 4}}}\n'
    return body.encode()


@pytest.fixture
def long_session(session: Path) -> Path:
    """The seed session with a messages.jsonl of ~20 MiB (10,000 lines of 2 KB)."""
    with open(session / "messages.jsonl", "ab") as handle:
        for n in range(10_000):
            handle.write(_line(1000 + n))
    _abi_rules._RUNNING.clear()
    _abi._HISTORIES.clear()
    return session


class _ReadSpy:
    """Counts the bytes the session reader takes from each file (the real reads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes: dict[str, int] = {}
        real = _abi_reader._Reader.chunks
        spy = self

        def chunks(reader: Any, rel: str, start: int = 0, limit: int | None = None) -> Any:
            stream = real(reader, rel, start, limit)
            if stream is None:
                return None

            def counted() -> Any:
                for chunk in stream:
                    spy.bytes[rel] = spy.bytes.get(rel, 0) + len(chunk)
                    yield chunk
            return counted()

        monkeypatch.setattr(_abi_reader._Reader, "chunks", chunks)


def test_reading_a_long_history_keeps_memory_bounded(long_session: Path) -> None:
    size = (long_session / "messages.jsonl").stat().st_size
    assert size > 20_000_000
    tracemalloc.start()
    try:
        snapshot = read_session(long_session)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snapshot.history["messages.jsonl"].size == size
    assert peak < 8_000_000, peak  # chunks and line offsets, never the file (was > 2x size)


def test_an_append_is_read_incrementally_and_reported_like_a_fresh_reading(
        long_session: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = read_session(long_session)
    spy = _ReadSpy(monkeypatch)
    with open(long_session / "messages.jsonl", "ab") as handle:
        handle.write(_line(99_999))
    later = read_session(long_session, previous=first.history)
    assert later.breaches == []
    size = (long_session / "messages.jsonl").stat().st_size
    # the hash: first and last 4 KiB as they were, then the new line; the parse: the new
    # line; the digests of the ranges the pack names (its tail of history): < 1% of the file
    assert spy.bytes["messages.jsonl"] < size // 100, (spy.bytes, size)
    _abi_rules._RUNNING.clear()
    _abi._HISTORIES.clear()
    fresh = read_session(long_session, previous=first.history)
    assert fresh.history == later.history
    assert fresh.history["messages.jsonl"].size == size
    assert fresh.bundle is not None and later.bundle is not None
    assert fresh.bundle.to_dict() == later.bundle.to_dict()  # the same items and digests


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_rewrite_at_either_end_is_found_on_the_incremental_look(long_session: Path,
                                                                   where: str) -> None:
    first = read_session(long_session)
    path = long_session / "messages.jsonl"
    size = path.stat().st_size
    offset = 1 if where == "head" else size - 100
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"#")
        handle.seek(0, os.SEEK_END)
        handle.write(_line(5))
    later = read_session(long_session, previous=first.history)
    assert [b.rule for b in later.breaches] == ["messages_append_only"]
    assert f"the first {size} bytes of messages.jsonl were rewritten" in later.breaches[0].detail


def test_a_rewrite_in_the_middle_is_found_by_the_next_whole_reading(
        long_session: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = long_session / "messages.jsonl"
    first = read_session(long_session)

    def rewrite_middle_and_append(n: int) -> None:
        with open(path, "r+b") as handle:
            handle.seek(path.stat().st_size // 2)
            handle.write(b"#")
            handle.seek(0, os.SEEK_END)
            handle.write(_line(n))

    rewrite_middle_and_append(1)
    # within FULL_CHECK_EVERY the incremental look checks the ends only
    quick = read_session(long_session, previous=first.history)
    assert quick.breaches == []
    monkeypatch.setattr(_abi_rules, "FULL_CHECK_EVERY", 0.0)  # the time has come
    rewrite_middle_and_append(2)
    whole = read_session(long_session, previous=quick.history)
    assert [b.rule for b in whole.breaches] == ["messages_append_only"]
