"""A rotation whose new segment cannot be made whole (the file not created: too many open
files, a full disk; its checkpoint not written) leaves the old segment active, open and in
place: the WAL's records keep going to the WAL, and its last checkpoint (the envelopes
written, the sink position) survives compaction. Failures are injected into ``os.open`` and
``os.writev`` as the WAL module calls them (no real full disk here)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from otel_agent_context.processor import _wal
from otel_agent_context.processor._wal import DONE, SPANS, WriteAheadLog, encode_done

KEY = ("t1", "ctx-1")


def _wal_with_a_written_envelope(directory: Path) -> WriteAheadLog:
    wal = WriteAheadLog(directory, segment_bytes=1 << 20, fsync=True)
    wal.open()
    written = [(KEY, 1.7e9)]
    wal.start(lambda: encode_done(written, (1, 500)))
    position = wal.append(SPANS, b"span-of-ctx-1")
    wal.pin(position[0])
    wal.sync(position)
    wal.append(DONE, encode_done(written, (1, 500)))
    wal.unpin(position[0])
    return wal


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no_fsync"])
def test_a_new_segment_that_cannot_be_created_leaves_the_old_one_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool) -> None:
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=1 << 20, fsync=fsync)
    wal.open()
    wal.start(lambda: encode_done([], None))
    wal.sync(wal.append(SPANS, b"first"))
    real_open = os.open

    def no_more_files(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("wal-00000002.log"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_wal.os, "open", no_more_files)
    with pytest.raises(OSError, match="Too many open files"):
        wal.compact(idle_rotate_bytes=1)
    monkeypatch.setattr(_wal.os, "open", real_open)

    wal.sync(wal.append(SPANS, b"second"))  # acknowledged: must be in the WAL
    # another file opened now takes the lowest free descriptor: not the WAL's
    other = tmp_path / "other.jsonl"
    with open(other, "ab") as handle:
        handle.write(b"line 1\n")
        handle.flush()
        wal.sync(wal.append(SPANS, b"third"))
        handle.write(b"line 2\n")
    wal.close()
    assert other.read_bytes() == b"line 1\nline 2\n"  # nothing of the WAL's in it
    replay = WriteAheadLog(tmp_path / "wal", segment_bytes=1 << 20, fsync=False).open()
    assert [payload for _, payload in replay.spans] == [b"first", b"second", b"third"]
    assert replay.torn_bytes == 0 and replay.corrupt_segments == []


def test_a_checkpoint_that_cannot_be_written_keeps_the_last_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "wal"
    wal = _wal_with_a_written_envelope(directory)

    def disk_full(fd: int, buffers: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_wal.os, "writev", disk_full)
    with pytest.raises(OSError, match="No space left"):
        wal.compact(idle_rotate_bytes=1)
    monkeypatch.undo()
    assert sorted(p.name for p in directory.iterdir()) == ["wal-00000001.log"]

    wal.compact()  # the next batch's compaction: nothing to delete
    later = wal.append(SPANS, b"later-span")  # an open envelope's span
    wal.pin(later[0])
    wal.sync(later)
    wal.segment_bytes = 1  # the disk has room again: the next append rotates
    wal.sync(wal.append(SPANS, b"next-span"))
    wal.close()
    assert sorted(p.name for p in directory.iterdir()) == ["wal-00000001.log",
                                                           "wal-00000002.log"]
    replay = WriteAheadLog(directory, segment_bytes=1 << 20, fsync=False).open()
    assert KEY in replay.done  # a client's retry of it stays a duplicate
    assert replay.sink_position == (1, 500)  # the JSON Lines recovery knows where it was
    assert [payload for _, payload in replay.spans] == [b"span-of-ctx-1", b"later-span",
                                                        b"next-span"]
