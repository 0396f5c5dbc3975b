"""The store in a process of its own (``store.writer: process``, the default on two or more
cores, asked for here whatever the machine): a child
SIGKILLed in the middle of a batch is restarted and the batch written again (nothing lost,
nothing twice); envelopes the database refuses are still split out and counted, in the child,
and reported to the processor's metrics; shutdown stops the child."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import struct
import termios
from pathlib import Path

import pytest
from processor_testkit import config, envelope_spans, read_bundles, request, wait_for

from otel_agent_context._store import open_store
from otel_agent_context.processor import Processor
from otel_agent_context.processor._store_process import StoreProcess, encode_indexed
from otel_agent_context.processor._store_sink import StoreSink


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def _unread(sink: StoreProcess) -> int:
    """Bytes sent to the (stopped) child that it has not read yet."""
    child = sink._child
    assert child is not None and child.stdin is not None
    return struct.unpack("i", fcntl.ioctl(child.stdin.fileno(), termios.FIONREAD,
                                          b"\0\0\0\0"))[0]


def _store_errors(processor: Processor) -> float:
    text = processor.pipeline.metrics.render(None)[0].decode()
    for line in text.splitlines():
        if line.startswith('context_processor_sink_errors_total{sink="store"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_store_process_killed_mid_batch_is_restarted_and_loses_nothing(
        tmp_path: Path, store_url: str) -> None:
    processor = Processor(config(tmp_path, store__url=store_url, store__writer="process",
                                 buffer__envelope_timeout=30, buffer__orphan_timeout=60)).start()
    try:
        sink = processor.pipeline.store
        assert isinstance(sink, StoreProcess)
        wanted: set[str] = set()
        for round_ in range(3):
            first = sink.pid
            assert first is not None and first != os.getpid()
            # stopped, the child holds the batch it was sent: the processor waits for its
            # answer and records nothing written; then it dies in the middle of that batch
            os.kill(first, signal.SIGSTOP)
            ids = [f"r{round_}-{n}" for n in range(5)]
            processor.pipeline.ingest(request([s for n, cid in enumerate(ids)
                                               for s in envelope_spans(100 * round_ + n + 1,
                                                                       cid)])
                                      .SerializeToString(), "test")
            wanted.update(ids)
            wait_for(lambda: len(read_bundles(tmp_path / "out")) >= len(wanted), 20,
                     message="the JSON Lines file")
            assert processor.pipeline.queue_size > 0, "recorded written before the store had it"
            wait_for(lambda: _unread(sink) > 0, 10, message="the batch sent to the child")
            errors = _store_errors(processor)
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: processor.pipeline.queue_size == 0, 30,
                     message="the batch written by a new store process")
            assert sink.pid not in (None, first) and not _alive(first)
            assert _store_errors(processor) > errors
        assert sink.starts == 4
        with open_store(store_url) as store:
            rows = [r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")]
            items = store.rows("SELECT context_id, COUNT(*) AS n FROM items "
                               "GROUP BY context_id")
        assert sorted(rows) == sorted(wanted), "an envelope is missing or stored twice"
        assert {r["n"] for r in items} == {4}, "an envelope's item rows are missing or doubled"
        keys = [b["context_envelope"]["context_id"] for b in read_bundles(tmp_path / "out")]
        assert sorted(keys) == sorted(wanted)
        last = sink.pid
        assert last is not None
    finally:
        processor.stop(timeout=10)
    assert not _alive(last), "shutdown left the store process running"


def test_an_envelope_the_database_refuses_is_counted_from_the_store_process(
        tmp_path: Path) -> None:
    """The child splits a refused batch down to the one envelope and leaves it out; the
    count comes back to the processor's ``context_processor_store_left_out_total``."""
    db = tmp_path / "out" / "context.db"
    processor = Processor(config(tmp_path, store__url=f"sqlite:///{db}", store__writer="process",
                                 buffer__envelope_timeout=30, buffer__orphan_timeout=60)).start()
    try:
        # the database itself refuses one envelope (a trigger, as a CHECK would)
        with sqlite3.connect(db) as other:
            other.execute("CREATE TRIGGER refuse BEFORE INSERT ON envelopes "
                          "WHEN NEW.context_id = 'refused' "
                          "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        ids = ["a", "b", "refused", "c"]
        processor.pipeline.ingest(request([s for n, cid in enumerate(ids)
                                           for s in envelope_spans(n + 1, cid)])
                                  .SerializeToString(), "test")
        wait_for(lambda: processor.pipeline.queue_size == 0
                 and len(read_bundles(tmp_path / "out")) == 4, 20, message="the batch")
        with open_store(str(db)) as store:
            stored = {r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")}
        assert stored == {"a", "b", "c"}
        text = processor.pipeline.metrics.render(None)[0].decode()
        assert 'context_processor_store_left_out_total{reason="refused"} 1.0' in text
    finally:
        processor.stop(timeout=10)


def test_a_store_the_process_cannot_open_is_a_configuration_error(tmp_path: Path) -> None:
    from otel_agent_context.exceptions import ConfigError

    sink = StoreProcess(StoreSink("postgresql://nobody@127.0.0.1:1/none"))
    with pytest.raises(ConfigError, match="store.url"):
        sink.open()
    assert sink.pid is None


def _contents(path: Path) -> dict[str, list[tuple[str, ...]]]:
    """Every table's rows as SQL literals (``quote``: the type shows, 1 is not '1' nor 1.0),
    in key order, the time of storing left out."""
    from otel_agent_context._store._rows import COLUMNS

    with sqlite3.connect(path) as raw:
        return {table: raw.execute(
            f"SELECT {', '.join(f'quote({c})' for c in columns)} FROM {table} "
            f"ORDER BY {', '.join(f'quote({c})' for c in columns)}").fetchall()
            for table, columns in COLUMNS.items()}


def test_the_store_process_stores_what_the_store_stores_in_process(
        tmp_path: Path, demo_bundles: list[dict[str, object]]) -> None:
    """The child binds None and bool through registered adapters (``bind_plainly``) and
    decodes the lines itself; the tables hold the same values, of the same SQLite types, as
    the store written in this process with the driver's own binding."""
    import orjson
    from test_rows_equivalence import full_bundle

    from otel_agent_context.rebuild._encode import encode_bundle

    bundles = [*demo_bundles, full_bundle()]
    bundles[-1]["context_budgets"][1]["max_tokens"] = 5  # 2**70: not JSON
    bundles[-1]["context_budgets"][1]["utilization"] = 0.5  # NaN: not JSON
    lines = [encode_bundle(b) for b in bundles]
    batch = [(("", ""), orjson.loads(line), line) for line in lines]
    # as the emitter hands them over: where the members the rows read are in each line
    members = [encode_indexed(orjson.loads(line))[1] for line in lines]
    assert all(members)
    here = StoreSink(str(tmp_path / "here.db"))
    child = StoreProcess(StoreSink(str(tmp_path / "child.db")))
    whole = StoreProcess(StoreSink(str(tmp_path / "whole.db")))
    try:
        here.write(batch)
        child.write(batch[:4], members[:4])
        child.write(batch[4:], members[4:])
        child.write(batch[2:5], members[2:5])  # written again: replaced, nothing twice
        whole.write(batch)  # no index (recovery's bundles): each line decoded whole
    finally:
        here.close()
        child.close()
        whole.close()
    expected = _contents(tmp_path / "here.db")
    assert expected["items"] and expected["blocks"] and expected["compactions"]
    assert any("NULL" in row for row in expected["items"])
    assert _contents(tmp_path / "child.db") == expected
    assert _contents(tmp_path / "whole.db") == expected


def _bundles_to_index(demo_bundles: list[dict[str, object]]) -> list[dict[str, object]]:
    import orjson
    from test_rows_equivalence import full_bundle

    def plain() -> dict[str, object]:  # full_bundle() as written: what JSON cannot carry repaired
        from otel_agent_context.rebuild._encode import encode_bundle

        result: dict[str, object] = orjson.loads(encode_bundle(full_bundle()))
        return result

    odd = plain()
    odd["context_events"] = [{"text": 'quote " back\\slash \n \u2028 é 😀 \x00'}]
    odd["context_envelope"]["metadata"]["k\"ey"] = "v"  # type: ignore[index]
    return [*demo_bundles, plain(), odd, {"rebuild": {}}, {}]


def test_an_indexed_line_is_the_bundles_line_and_its_members_the_sections(
        demo_bundles: list[dict[str, object]]) -> None:
    """``encode_indexed`` writes the very bytes ``encode_bundle`` writes, and its spans cut
    out exactly the members ``bundle_rows`` reads."""
    import orjson

    from otel_agent_context._store._rows import SECTIONS
    from otel_agent_context.rebuild._encode import encode_bundle

    for bundle in _bundles_to_index(demo_bundles):
        line, spans = encode_indexed(bundle)
        assert line == encode_bundle(bundle)
        assert spans is not None
        sections = {k: v for k, v in bundle.items() if k in SECTIONS}
        assert len(spans) == 2 * len(sections)
        cut = b"{" + b",".join(line[spans[i]:spans[i + 1]]
                               for i in range(0, len(spans), 2)) + b"}"
        assert cut == orjson.dumps(sections)


@pytest.mark.parametrize("odd", ["surrogate", "big int", "int key"])
def test_a_bundle_only_the_repairing_path_can_write_is_indexed_whole(odd: str) -> None:
    """A value orjson refuses in a member: the line is ``encode_bundle``'s (repaired), with
    no spans (the child then decodes it whole, as for recovery's bundles, above)."""
    import copy

    import orjson
    from test_rows_equivalence import full_bundle

    from otel_agent_context.rebuild._encode import encode_bundle

    bundle = orjson.loads(encode_bundle(full_bundle()))  # only the value below to repair
    budget = bundle["context_budgets"][0]
    if odd == "surrogate":
        budget["target"] = "bad \ud800 text"
    elif odd == "big int":
        budget["max_tokens"] = 2**70
    else:
        bundle["context_envelope"]["metadata"][7] = "int key"
    assert encode_indexed(copy.deepcopy(full_bundle()))[1] is None  # its 2**70
    expected = encode_bundle(copy.deepcopy(bundle))
    line, spans = encode_indexed(bundle)
    assert (line, spans) == (expected, None)
    assert b"rebuild" in line


def test_write_lines_refuses_an_index_that_does_not_match_the_lines(tmp_path: Path) -> None:
    import orjson

    from otel_agent_context.processor._store_process import request, write_lines

    line = orjson.dumps({"context_envelope": {"context_id": "x"}}) + b"\n"
    sink = StoreSink(str(tmp_path / "x.db"))
    try:
        with pytest.raises(ValueError, match="indexed"):
            write_lines(sink, request([line], None) + line)
        write_lines(sink, request([line], None))
        assert sink.opened.rows("SELECT context_id FROM envelopes") == [{"context_id": "x"}]
    finally:
        sink.close()
