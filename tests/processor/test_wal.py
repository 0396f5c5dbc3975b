"""The write-ahead log: replay, torn tails, done records, ordered compaction."""

from __future__ import annotations

import time
from pathlib import Path

from otel_agent_context.processor._wal import DONE, EVENTS, SPANS, WriteAheadLog, encode_done


def _open(path: Path, **kwargs) -> tuple[WriteAheadLog, object]:
    wal = WriteAheadLog(path, segment_bytes=kwargs.pop("segment_bytes", 1 << 20), **kwargs)
    replay = wal.open()
    wal.start(lambda: encode_done([], None))
    return wal, replay


def test_records_survive_reopen(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path)
    wal.append(SPANS, b"one")
    position = wal.append(SPANS, b"two")
    wal.sync(position)
    wal.append(DONE, encode_done([(("t1", "c1"), 123.0)], (1, 99)))
    wal.close()
    wal2, replay = _open(tmp_path)
    assert [payload for _, payload in replay.spans] == [b"one", b"two"]
    assert replay.done == {("t1", "c1"): 123.0}
    assert replay.sink_position == (1, 99)
    assert wal2.active_segment == 2  # appends go to a fresh segment
    wal2.close()


def test_span_and_event_records_replay_in_the_order_written(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path, segment_bytes=64)
    wal.append(EVENTS, b"events-1")
    wal.append(SPANS, b"spans-1")
    wal.append(EVENTS, b"events-2" * 10)  # the next append rotates
    wal.append(SPANS, b"spans-2")
    wal.close()
    wal2, replay = _open(tmp_path)
    assert [(kind, segment, payload) for kind, segment, payload in replay.records] == [
        (EVENTS, 1, b"events-1"), (SPANS, 1, b"spans-1"), (EVENTS, 1, b"events-2" * 10),
        (SPANS, 2, b"spans-2")]
    assert [payload for _, payload in replay.spans] == [b"spans-1", b"spans-2"]
    wal2.close()


def test_done_records_carry_the_spans_of_envelopes_with_log_events(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path)
    wal.append(DONE, encode_done([(("t1", "c1"), 10.0)], (1, 5), [(("t1", "s1"), 10.0)]))
    wal.append(DONE, encode_done([(("t2", "c2"), 11.0)], (1, 9)))
    wal.close()
    wal2, replay = _open(tmp_path)
    assert replay.done == {("t1", "c1"): 10.0, ("t2", "c2"): 11.0}
    assert replay.done_spans == {("t1", "s1"): 10.0}
    wal2.close()


def test_torn_tail_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path, fsync=False)
    wal.append(SPANS, b"kept")
    wal.append(SPANS, b"x" * 100)
    wal.close()
    segment = tmp_path / "wal-00000001.log"
    data = segment.read_bytes()
    segment.write_bytes(data[:-30])  # a crash in the middle of the last write
    wal2, replay = _open(tmp_path)
    assert [payload for _, payload in replay.spans] == [b"kept"]
    assert replay.torn_bytes > 0
    wal2.close()
    _, again = _open(tmp_path)
    assert [payload for _, payload in again.spans] == [b"kept"]


def test_corrupt_record_in_an_old_segment_is_reported(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path, fsync=False)
    wal.append(SPANS, b"a" * 50)
    wal.close()
    wal, _ = _open(tmp_path, fsync=False)  # segment 2
    wal.append(SPANS, b"b")
    wal.close()
    first = tmp_path / "wal-00000001.log"
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF
    first.write_bytes(bytes(data))
    _, replay = _open(tmp_path)
    assert replay.corrupt_segments == ["wal-00000001.log"]
    assert [payload for _, payload in replay.spans] == [b"b"]


def test_compaction_deletes_only_unpinned_prefix(tmp_path: Path) -> None:
    wal, _ = _open(tmp_path, segment_bytes=100, fsync=False)
    segments = []
    for _ in range(4):
        segments.append(wal.append(SPANS, b"z" * 120)[0])
    assert segments == [1, 2, 3, 4]
    wal.pin(1)
    wal.pin(3)
    assert wal.compact() == 0  # segment 1 is pinned: nothing after it may go
    wal.unpin(1)
    assert wal.compact() == 2  # 1 and 2 go; 3 is pinned, so 3 and 4 stay
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "wal-00000003.log", "wal-00000004.log"]
    wal.unpin(3)
    wal.compact(idle_rotate_bytes=0)
    assert wal.segment_count == 1  # only the fresh active segment is left
    wal.close()


def test_idle_rotation_keeps_the_checkpoint(tmp_path: Path) -> None:
    done = [(("t", f"c{i}"), time.time()) for i in range(3)]
    wal = WriteAheadLog(tmp_path, segment_bytes=1 << 20, fsync=True)
    wal.open()
    wal.start(lambda: encode_done(done, (1, 10)))
    wal.append(SPANS, b"s" * 10)
    wal.compact(idle_rotate_bytes=1)
    assert wal.segment_count == 1 and wal.active_segment == 2
    wal.close()
    _, replay = _open(tmp_path)
    assert set(replay.done) == {key for key, _ in done}
    assert replay.spans == []
    assert replay.sink_position == (1, 10)
