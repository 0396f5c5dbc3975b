"""Crash recovery of the store sink: a bundle the JSON Lines file has but the WAL never
recorded as written (a crash between the two sinks) reaches the store at the next start, and
a replay never duplicates a row. (tests/processor/test_faults.py checks the store after real
SIGKILLs mid-stream.)"""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
from processor_testkit import config, envelope_spans, read_bundles, request, wait_for

from otel_agent_context._store import open_store
from otel_agent_context.processor import Processor


def _run(tmp_path: Path, *, store: str, envelopes: list[tuple[int, str]]) -> None:
    processor = Processor(config(tmp_path, store__url=store, buffer__envelope_timeout=30,
                                 buffer__orphan_timeout=60)).start()
    try:
        for trace, context_id in envelopes:
            processor.pipeline.ingest(request(envelope_spans(trace, context_id))
                                      .SerializeToString(), "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= len(envelopes), 20,
                 message="the bundles")
    finally:
        processor.stop(timeout=10)


def test_a_bundle_written_to_json_lines_only_reaches_the_store_at_restart(
        tmp_path: Path) -> None:
    _run(tmp_path, store="off", envelopes=[(1, "first")])
    [first] = read_bundles(tmp_path / "out")
    # as if the processor wrote this line and died before the WAL recorded it
    torn = copy.deepcopy(first)
    torn["context_envelope"]["context_id"] = "written-before-the-crash"
    files = sorted((tmp_path / "out").glob("bundles-*.jsonl"))
    with open(files[-1], "ab") as handle:
        handle.write(orjson.dumps(torn) + b"\n")
    _run(tmp_path, store="sqlite", envelopes=[(2, "second")])
    with open_store(str(tmp_path / "out" / "context.db")) as store:
        ids = sorted(r["context_id"] for r in store.rows("SELECT context_id FROM envelopes"))
    # "first" was written while the store was off and recorded as done: not replayed
    assert ids == ["second", "written-before-the-crash"]
    assert [b["context_envelope"]["context_id"] for b in read_bundles(tmp_path / "out")] == [
        "first", "written-before-the-crash", "second"]


def test_restarting_on_the_same_output_never_duplicates_rows(tmp_path: Path) -> None:
    _run(tmp_path, store="sqlite", envelopes=[(1, "a"), (2, "b")])
    _run(tmp_path, store="sqlite", envelopes=[(3, "c")])
    with open_store(str(tmp_path / "out" / "context.db")) as store:
        assert [r["n"] for r in store.rows(
            "SELECT COUNT(*) AS n FROM envelopes GROUP BY context_id ORDER BY context_id")] == \
            [1, 1, 1]
        items = store.rows("SELECT context_id, COUNT(*) AS n FROM items GROUP BY context_id")
        assert {r["context_id"]: r["n"] for r in items} == {"a": 4, "b": 4, "c": 4}


def test_a_store_locked_by_someone_else_delays_and_loses_nothing(tmp_path: Path) -> None:
    """Another process holds the SQLite file's write lock for a while (a person running a
    long query with a write, a backup): the store's thread waits, the WAL keeps every batch
    unrecorded until the store has it, and afterwards both sinks hold each envelope once."""
    import sqlite3
    import threading
    import time

    processor = Processor(config(tmp_path, buffer__envelope_timeout=30,
                                 buffer__orphan_timeout=60)).start()
    db = tmp_path / "out" / "context.db"
    locked = threading.Event()

    def hold_the_lock() -> None:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(2.0)
        other.execute("ROLLBACK")
        other.close()

    holder = threading.Thread(target=hold_the_lock)
    try:
        holder.start()
        assert locked.wait(10)
        for trace in range(1, 6):
            processor.pipeline.ingest(request(envelope_spans(trace, f"ctx-{trace}"))
                                      .SerializeToString(), "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 5, 20, message="JSON Lines")
        with open_store(str(db)) as store:
            if holder.is_alive():  # still locked: nothing could be stored yet
                assert store.rows("SELECT COUNT(*) AS n FROM envelopes")[0]["n"] == 0
            wait_for(lambda: store.rows("SELECT COUNT(*) AS n FROM envelopes")[0]["n"] == 5,
                     30, message="the store, once the lock is released")
    finally:
        holder.join(10)
        processor.stop(timeout=10)
    with open_store(str(db)) as store:
        ids = sorted(r["context_id"] for r in store.rows("SELECT context_id FROM envelopes"))
    assert ids == [f"ctx-{n}" for n in range(1, 6)]
    assert sorted(b["context_envelope"]["context_id"]
                  for b in read_bundles(tmp_path / "out")) == ids
