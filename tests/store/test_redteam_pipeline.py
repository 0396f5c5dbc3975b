"""Red team, end to end: one hostile envelope sent over OTLP must not stop the processor's
store (the emitter retries a failing store batch, and every later envelope waits behind it)."""

from __future__ import annotations

from pathlib import Path

from processor_testkit import config, envelope_spans, read_bundles, request, wait_for

from otel_agent_context._store import open_store
from otel_agent_context.processor import Processor


def _hostile(trace: int) -> list:
    spans = envelope_spans(trace, "hostile\x00ctx")
    for s in spans[1:]:
        for event in s.events:
            for kv in event.attributes:
                if kv.key == "context.selection.rank":
                    kv.value.int_value = 2**40  # an int64, beyond PostgreSQL's INTEGER
                if kv.key == "context.item.id":
                    kv.value.string_value += "\x00nul"
    return spans


def test_a_hostile_envelope_does_not_stall_the_postgresql_store(tmp_path: Path,
                                                                postgres_url: str) -> None:
    processor = Processor(config(tmp_path, store__url=postgres_url, buffer__envelope_timeout=30,
                                 buffer__orphan_timeout=60)).start()
    try:
        processor.pipeline.ingest(request(_hostile(1)).SerializeToString(), "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 1, 20, message="hostile")
        processor.pipeline.ingest(request(envelope_spans(2, "after")).SerializeToString(),
                                  "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 2, 20, message="after")
        with open_store(postgres_url) as store:
            def stored() -> set[str]:
                return {r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")}
            wait_for(lambda: "after" in stored(), 20, message="the next envelope in the store")
            assert stored() == {"hostile\ufffdctx", "after"}
            # retried with its NUL characters replaced, the whole bundle is stored (the
            # store's child decodes only the members the rows read: the rest from the line)
            [row] = store.rows("SELECT bundle FROM envelopes WHERE context_id = ?",
                               ("hostile\ufffdctx",))
            written = next(b for b in read_bundles(tmp_path / "out")
                           if b["context_envelope"]["context_id"] == "hostile\x00ctx")
            assert set(row["bundle"]) == set(written)
            assert "context_events" in written
    finally:
        processor.stop(timeout=10)


def test_a_span_dated_after_2262_does_not_stall_the_sqlite_store(tmp_path: Path) -> None:
    """OTLP times are unsigned 64-bit nanoseconds: beyond what a BIGINT holds after 2262."""
    late = envelope_spans(1, "late")
    for s in late:
        s.start_time_unix_nano = 2**64 - 10**9 + (s.start_time_unix_nano % 10**6)
        s.end_time_unix_nano = s.start_time_unix_nano + 1000
    processor = Processor(config(tmp_path, store__url="sqlite", buffer__envelope_timeout=30,
                                 buffer__orphan_timeout=60)).start()
    try:
        processor.pipeline.ingest(request(late).SerializeToString(), "test")
        processor.pipeline.ingest(request(envelope_spans(2, "after")).SerializeToString(),
                                  "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 2, 20, message="both bundles")
        with open_store(str(tmp_path / "out" / "context.db")) as store:
            def stored() -> set[str]:
                return {r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")}
            wait_for(lambda: stored() == {"late", "after"}, 20, message="both in the store")
    finally:
        processor.stop(timeout=10)


def test_a_store_without_room_for_a_batch_never_stalls_the_json_lines(tmp_path: Path) -> None:
    """A store volume too small for a whole batch (a small tmpfs needs root to mount: here
    SQLite's own ``max_page_count`` caps the file, and SQLite fails the write with SQLITE_FULL
    exactly as on a full disk). The batch is written in parts down to single envelopes; the
    one envelope that cannot fit even alone is left out of the store, logged and counted, and
    the JSON Lines file gets every envelope, those that came after included. (The store on
    the processor's thread, to reach its connection; tests/store/test_store_process.py
    checks the same splitting and counting in the store's own process.)"""
    processor = Processor(config(tmp_path, store__url="sqlite", store__writer="thread",
                                 buffer__envelope_timeout=30,
                                 buffer__orphan_timeout=60)).start()
    try:
        store = processor.pipeline.store
        assert store is not None and store.store is not None
        raw = store.store._db.raw  # the sink's own connection: the cap applies to its writes
        [(pages,)] = raw.execute("PRAGMA page_count").fetchall()
        [(page_size,)] = raw.execute("PRAGMA page_size").fetchall()
        raw.execute(f"PRAGMA max_page_count = {pages + 160 * 1024 // page_size}")  # 160 KiB
        # one request: the small envelopes and the huge one reach the store in one batch
        spans = [s for n in range(6) for s in envelope_spans(10 + n, f"small-{n}")]
        spans += envelope_spans(99, "huge", stages=400)  # 800 items: far beyond 160 KiB
        processor.pipeline.ingest(request(spans).SerializeToString(), "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 7, 20, message="the batch")
        processor.pipeline.ingest(request(envelope_spans(3, "after")).SerializeToString(),
                                  "test")
        wait_for(lambda: len(read_bundles(tmp_path / "out")) >= 8, 20,
                 message="the next envelope in the JSON Lines file, behind the full store")
        with open_store(str(tmp_path / "out" / "context.db")) as reader:
            def stored() -> set[str]:
                return {r["context_id"] for r in reader.rows("SELECT context_id FROM envelopes")}
            wanted = {f"small-{n}" for n in range(6)} | {"after"}
            wait_for(lambda: stored() == wanted, 20, message="all but the huge one stored")
        wait_for(lambda: store.store is not None and store.store.left_out == {"full": 1}, 5,
                 message="the huge envelope counted")
        text = processor.pipeline.metrics.render(None)[0].decode()
        assert 'context_processor_store_left_out_total{reason="full"} 1.0' in text
    finally:
        processor.stop(timeout=10)
