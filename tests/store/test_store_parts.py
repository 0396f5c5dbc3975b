"""A batch sent to the store's process in parts while the emitter rebuilds it
(``store.writer: process``): the child writes the parts in one transaction and commits at the
last one. A part that fails, a part missing, and a crash between parts (of the processor or of
the child) commit nothing of the batch; the batch is written again whole (or, after a crash,
replayed from the WAL and recovered from JSON Lines), and the store ends with every envelope
once and its items once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from processor_testkit import REPO, config, envelope_spans, read_bundles, request, wait_for

from otel_agent_context._store import open_store
from otel_agent_context.processor import Processor
from otel_agent_context.processor import _pipeline as pipeline_module
from otel_agent_context.processor._store_process import (
    BatchInParts,
    StoreChildError,
    StoreProcess,
    encode_indexed,
    part_head,
)
from otel_agent_context.processor._store_process import request as store_request
from otel_agent_context.processor._store_sink import StoreSink

#: item rows of one envelope of ``envelope_spans`` (two stages)
ITEMS = 4


def _metric(processor: Processor, prefix: str) -> float:
    text = processor.pipeline.metrics.render(None)[0].decode()
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _stored(url: str) -> tuple[list[str], dict[str, int]]:
    """The store's envelopes (context ids, one per row) and item rows per envelope (read
    only: a write transaction may be open)."""
    with open_store(url, read_only=True) as store:
        rows = [r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")]
        items = {r["context_id"]: r["n"] for r in store.rows(
            "SELECT context_id, COUNT(*) AS n FROM items GROUP BY context_id")}
    return sorted(rows), items


def _spy_parts(sink: StoreProcess, db: Path, trigger: str) -> list[tuple[int, int, bool, int]]:
    """Create ``trigger`` in the SQLite store ``db``, and record each part the pipeline
    sends from now on: (batch, number, last, envelopes)."""
    with sqlite3.connect(db) as other:
        other.execute(trigger)
    calls: list[tuple[int, int, bool, int]] = []
    write_part = sink.write_part

    def spy(part: Any, members: Any, batch: int, number: int, last: bool) -> None:
        calls.append((batch, number, last, len(part)))
        write_part(part, members, batch, number, last)

    sink.write_part = spy  # type: ignore[method-assign]
    return calls


def _start(tmp_path: Path, url: str) -> tuple[Processor, StoreProcess]:
    processor = Processor(config(tmp_path, store__url=url, store__writer="process",
                                 buffer__envelope_timeout=30, buffer__orphan_timeout=60)).start()
    sink = processor.pipeline.store
    assert isinstance(sink, StoreProcess)
    return processor, sink


def _ingest(processor: Processor, ids: list[str]) -> None:
    """One request finishing one envelope per id (two stages each): one batch."""
    processor.pipeline.ingest(request([s for n, cid in enumerate(ids)
                                       for s in envelope_spans(n + 1, cid)])
                              .SerializeToString(), "test")


@pytest.fixture
def one_envelope_a_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every envelope its own part (a part is sent once its lines reach this many bytes)."""
    monkeypatch.setattr(pipeline_module, "_STORE_PART_BYTES", 1)


def test_a_part_that_fails_commits_nothing_and_the_batch_is_written_again_whole(
        tmp_path: Path, one_envelope_a_part: None) -> None:
    db = tmp_path / "out" / "context.db"
    processor, sink = _start(tmp_path, f"sqlite:///{db}")
    try:
        # the database fails the second envelope's insert, as an unusable database would
        # (an OperationalError, not data refused): its part fails, the first part is written
        calls = _spy_parts(sink, db, "CREATE TRIGGER fail BEFORE INSERT ON envelopes "
                           "WHEN NEW.context_id = 'b' BEGIN SELECT json('{'); END")
        ids = ["a", "b", "c", "d"]
        _ingest(processor, ids)
        wait_for(lambda: _metric(processor, 'context_processor_sink_errors_total{sink="store"}')
                 >= 2, 20, message="the batch failing, and failing again whole")
        # one batch, sent as four parts of one envelope and an empty last part
        assert [c[1:] for c in calls] == [(0, False, 1), (1, False, 1), (2, False, 1),
                                          (3, False, 1), (4, True, 0)]
        assert len({c[0] for c in calls}) == 1
        assert len(read_bundles(tmp_path / "out")) == 4
        assert processor.pipeline.queue_size == 4, "recorded written without the store"
        assert _stored(f"sqlite:///{db}") == ([], {}), "a part of a failed batch committed"
        with sqlite3.connect(db) as other:
            other.execute("DROP TRIGGER fail")
        wait_for(lambda: processor.pipeline.queue_size == 0, 20, message="the batch written")
        rows, items = _stored(f"sqlite:///{db}")
        assert rows == ids, "an envelope is missing or stored twice"
        assert items == dict.fromkeys(ids, ITEMS), "item rows missing or doubled"
        assert len(calls) == 5, "the batch was written again in parts, not whole"
    finally:
        processor.stop(timeout=10)


def test_a_part_the_database_refuses_leaves_that_envelope_out_once(
        tmp_path: Path, one_envelope_a_part: None) -> None:
    """Data refused in one part is no failure of the batch: the child writes the batch
    again whole, split, and leaves out only the refused envelope (counted once)."""
    db = tmp_path / "out" / "context.db"
    processor, sink = _start(tmp_path, f"sqlite:///{db}")
    try:
        calls = _spy_parts(sink, db, "CREATE TRIGGER refuse BEFORE INSERT ON envelopes "
                           "WHEN NEW.context_id = 'refused' "
                           "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        ids = ["a", "refused", "b", "c"]
        _ingest(processor, ids)
        wait_for(lambda: processor.pipeline.queue_size == 0
                 and len(read_bundles(tmp_path / "out")) == 4, 20, message="the batch")
        assert len(calls) == 5 and calls[-1][2]
        rows, items = _stored(f"sqlite:///{db}")
        assert rows == ["a", "b", "c"]
        assert items == dict.fromkeys(rows, ITEMS)
        assert _metric(processor,
                       'context_processor_store_left_out_total{reason="refused"}') == 1.0
        assert _metric(processor, 'context_processor_sink_errors_total{sink="store"}') == 0.0
    finally:
        processor.stop(timeout=10)


def test_a_store_process_killed_between_parts_commits_nothing_then_writes_the_batch(
        tmp_path: Path, store_url: str, one_envelope_a_part: None) -> None:
    processor, sink = _start(tmp_path, store_url)
    try:
        first = sink.pid
        assert first is not None
        write_part = sink.write_part

        def dying(part: Any, members: Any, batch: int, number: int, last: bool) -> None:
            write_part(part, members, batch, number, last)
            if number == 1:  # two parts in the child's open transaction, three to come
                os.kill(first, signal.SIGKILL)

        sink.write_part = dying  # type: ignore[method-assign]
        ids = ["a", "b", "c", "d"]
        _ingest(processor, ids)
        wait_for(lambda: processor.pipeline.queue_size == 0, 30,
                 message="the batch written by a new store process")
        assert sink.pid not in (None, first) and sink.starts == 2
        assert _metric(processor, 'context_processor_sink_errors_total{sink="store"}') >= 1
        rows, items = _stored(store_url)
        assert rows == ids, "an envelope is missing or stored twice"
        assert items == dict.fromkeys(ids, ITEMS)
    finally:
        processor.stop(timeout=10)


#: the processor, in a process of its own, SIGKILLed when about to send part ``die_at`` of
#: its first batch to the store's process (which then sees its input end between two parts)
_CRASHING = """
import os, signal, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from processor_testkit import config, envelope_spans, request
from otel_agent_context.processor import Processor, _pipeline
from otel_agent_context.processor._store_process import StoreProcess
tmp, url, die_at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
_pipeline._STORE_PART_BYTES = 1
write_part = StoreProcess.write_part
def dying(self, part, members, batch, number, last):
    if number == die_at:
        (tmp / "child.pid").write_text(str(self.pid))
        os.kill(os.getpid(), signal.SIGKILL)
    write_part(self, part, members, batch, number, last)
StoreProcess.write_part = dying
processor = Processor(config(tmp, store__url=url, store__writer="process",
                             buffer__envelope_timeout=30, buffer__orphan_timeout=60)).start()
ids = sys.argv[5].split(",")
processor.pipeline.ingest(request([s for n, cid in enumerate(ids)
                                   for s in envelope_spans(n + 1, cid)]).SerializeToString(),
                          "test")
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] == "Z"
    except FileNotFoundError:
        return True


def test_one_failed_batch_does_not_fail_the_batches_queued_behind_it(
        tmp_path: Path, one_envelope_a_part: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 1's store process dies; batch 2's first parts are already with the new one when
    batch 1 is written again whole, which rolls them back: batch 2 is then sent again whole
    itself, not failed and retried (and so on for every batch while any are queued)."""
    monkeypatch.setattr(pipeline_module, "_BATCH", 4)
    url = f"sqlite:///{tmp_path / 'out' / 'context.db'}"
    processor, sink = _start(tmp_path, url)
    whole: list[int] = []
    write_part, write = sink.write_part, sink.write
    first = sink.pid
    assert first is not None

    def dying(part: Any, members: Any, batch: int, number: int, last: bool) -> None:
        write_part(part, members, batch, number, last)
        if batch == 1 and number == 1:
            os.kill(first, signal.SIGKILL)  # one failure, in the first batch only

    def counting(batch: Any, members: Any = None) -> None:
        whole.append(len(batch))
        write(batch, members)

    sink.write_part, sink.write = dying, counting  # type: ignore[method-assign]
    try:
        ids = [f"e{i:02}" for i in range(20)]  # five batches of four, queued at once
        _ingest(processor, ids)
        wait_for(lambda: processor.pipeline.queue_size == 0
                 and processor.pipeline._pending is None, 60, message="every batch written")
        rows, items = _stored(url)
        assert rows == ids and items == dict.fromkeys(ids, ITEMS), "lost or doubled"
        assert _metric(processor, 'context_processor_sink_errors_total{sink="store"}') == 1
        assert whole == [4], "a batch behind the failed one failed too and was written whole"
    finally:
        processor.stop(timeout=10)


def test_a_part_whose_rows_cannot_be_made_rolls_the_transaction_back(tmp_path: Path) -> None:
    """``write_begun`` fails on a bundle it cannot turn into rows (a value JSON cannot hold):
    every part since the transaction began is rolled back and the store takes writes again."""
    url = f"sqlite:///{tmp_path / 'context.db'}"
    store = open_store(url)
    try:
        def bundle(cid: str, reasons: Any) -> dict[str, Any]:
            return {"context_envelope": {"context_id": cid, "telemetry_refs": [{"trace_id": "t"}]},
                    "rebuild": {"status": "partial", "partial_reasons": reasons}}

        store.write_begun([bundle("a", ["x"])])
        with pytest.raises(TypeError):
            store.write_begun([bundle("b", {1, 2})])  # a set: no JSON for it
        store.write([bundle("c", ["y"])])  # before: "cannot start a transaction within one"
        store.commit_begun()
        assert store.tuples("SELECT context_id FROM envelopes") == [("c",)]
    finally:
        store.close()


@pytest.mark.parametrize("die_at", [1, 4], ids=["after-the-first-part", "before-the-last"])
def test_a_processor_crash_between_parts_then_replay_stores_each_envelope_once(
        tmp_path: Path, store_url: str, die_at: int) -> None:
    """Killed after the first part (the JSON Lines file may not have the batch yet: the WAL
    replays it) or before the last (the file has it, the WAL has no record of it: recovery
    hands it to the store): nothing of the batch was committed, and after the restart every
    envelope is in the store once, with its items once."""
    ids = ["a", "b", "c", "d"]
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASHING, str(tmp_path), store_url, str(die_at),
         str(REPO / "tests" / "processor"), ",".join(ids)],
        cwd=REPO, capture_output=True, timeout=60)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode(errors="replace")
    child = int((tmp_path / "child.pid").read_text())
    # the store's process sees its input end with the batch's transaction open: rolled back
    wait_for(lambda: _gone(child), 20, message="the store's process to exit")
    assert _stored(store_url) == ([], {}), "a part of an unfinished batch committed"
    processor, _ = _start(tmp_path, store_url)
    try:
        wait_for(lambda: processor.pipeline.queue_size == 0
                 and len(read_bundles(tmp_path / "out")) == len(ids), 30,
                 message="the replayed batch written")
    finally:
        processor.stop(timeout=10)
    keys = sorted(b["context_envelope"]["context_id"] for b in read_bundles(tmp_path / "out"))
    assert keys == ids, "JSON Lines lost an envelope or holds one twice"
    rows, items = _stored(store_url)
    assert rows == ids, "an envelope is missing or stored twice"
    assert items == dict.fromkeys(ids, ITEMS), "item rows missing or doubled"


# -- the child's side, in this process --------------------------------------------------------


def _part(bundles: list[dict[str, Any]], batch: int, number: int, last: bool) -> bytes:
    encoded = [encode_indexed(b) for b in bundles]
    return store_request([line for line, _ in encoded], [spans for _, spans in encoded],
                         part_head(batch, number, last))


@pytest.fixture
def bundles(tmp_path: Path) -> list[dict[str, Any]]:
    """Four real bundles, rebuilt by the processor."""
    processor = Processor(config(tmp_path / "make", store__url="off")).start()
    try:
        processor.pipeline.ingest(request([s for n in range(4)
                                           for s in envelope_spans(n + 1, f"e{n}")])
                                  .SerializeToString(), "test")
        wait_for(lambda: len(read_bundles(tmp_path / "make" / "out")) == 4, 20)
    finally:
        processor.stop(timeout=10)
    return sorted(read_bundles(tmp_path / "make" / "out"),
                  key=lambda b: b["context_envelope"]["context_id"])


def _sink(tmp_path: Path) -> tuple[StoreSink, str]:
    url = f"sqlite:///{tmp_path / 'child.db'}"
    sink = StoreSink(url)
    sink.open()
    return sink, url


def test_the_parts_of_a_batch_commit_together_at_the_last(
        tmp_path: Path, bundles: list[dict[str, Any]]) -> None:
    sink, url = _sink(tmp_path)
    parts = BatchInParts(sink)
    try:
        assert not parts.take(_part(bundles[:2], 7, 0, False))
        assert not parts.take(_part(bundles[2:3], 7, 1, False))
        assert _stored(url) == ([], {}), "a part committed before the last"
        # the last part brings an envelope of an earlier part again: stored once, its last
        assert parts.take(_part(bundles[3:] + bundles[:1], 7, 2, True))
        parts.finish()
        rows, items = _stored(url)
        assert rows == ["e0", "e1", "e2", "e3"]
        assert items == dict.fromkeys(rows, ITEMS)
    finally:
        sink.close()


def test_a_missing_part_commits_nothing(tmp_path: Path, bundles: list[dict[str, Any]]) -> None:
    """A child started between two parts has only the later ones: the last part's answer
    is an error (the parent writes the batch again whole) and nothing is committed."""
    sink, url = _sink(tmp_path)
    parts = BatchInParts(sink)
    try:
        parts.take(_part(bundles[:1], 3, 0, False))
        parts.take(_part(bundles[2:3], 3, 2, True))  # part 1 never came
        with pytest.raises(StoreChildError, match="without part 1"):
            parts.finish()
        assert _stored(url) == ([], {})
        # a batch begun in a new child at its second part
        parts.take(_part(bundles[1:2], 4, 1, False))
        parts.take(_part(bundles[2:3], 4, 2, True))
        with pytest.raises(StoreChildError, match="without part 0"):
            parts.finish()
        assert _stored(url) == ([], {})
    finally:
        sink.close()


def test_a_batch_given_up_between_parts_is_rolled_back(
        tmp_path: Path, bundles: list[dict[str, Any]]) -> None:
    """The parent gives a batch up (its rebuild raised, or an earlier batch is written again
    whole first): the parts of it the child has are rolled back, never committed later."""
    sink, url = _sink(tmp_path)
    parts = BatchInParts(sink)
    try:
        parts.take(_part(bundles[:2], 1, 0, False))
        parts.take(_part(bundles[2:3], 2, 0, False))  # another batch: the first given up
        parts.take(_part(bundles[3:], 2, 1, True))
        parts.finish()
        rows, _ = _stored(url)
        assert rows == ["e2", "e3"]
        parts.take(_part(bundles[:1], 5, 0, False))
        parts.reset()  # a whole batch comes (the serving loop resets first)
        sink.write([(("", ""), bundles[1], orjson.dumps(bundles[1]) + b"\n")])
        assert _stored(url)[0] == ["e1", "e2", "e3"]
        parts.take(_part(bundles[1:2], 5, 1, True))  # the rest of the batch given up
        with pytest.raises(StoreChildError, match="without part 0"):
            parts.finish()
        assert _stored(url)[0] == ["e1", "e2", "e3"]
    finally:
        sink.close()
