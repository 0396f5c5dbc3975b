"""The write-ahead log: spans are durable here before an export is acknowledged.

Layout: numbered segment files ``wal-00000001.log`` in one directory. A record is::

    u32 length | u32 crc32(type + payload) | u8 type | payload

``SPANS`` records hold an OTLP ``ExportTraceServiceRequest`` (only its context spans);
``EVENTS`` records an OTLP ``ExportLogsServiceRequest`` (only its log-based context events);
``DONE`` records list the envelopes whose bundles the sinks have written, with the JSON
Lines position after them (and the spans of those that had log-based events: an event
record may outlive its span's record, and must not wait for a span already written); every
segment starts with a ``CHECKPOINT`` carrying the envelopes emitted recently (so a client's
retry after a restart stays a duplicate), those spans, and the sink position. Replay reads
everything, truncates a torn tail, and hands back the span and event records (in the order
they were written: an event joins its span whichever came first, and an envelope completes
as it did) and the done keys; appends then go to a fresh segment.

Compaction: the pipeline pins a segment for every open envelope with spans in it. Only the
oldest segments are deleted, in order, once nothing pins them, so a DONE record is never
deleted while spans it covers remain (a done marker always follows its spans). When every
envelope is written the active segment is rotated away too, so an idle processor keeps
an almost empty WAL.

Durability: with ``fsync`` the caller's :meth:`sync` waits for ``fdatasync`` (one call
covers every append before it: group commit); without it data survives a process crash
(SIGKILL) but not a power loss.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

__all__ = ["CHECKPOINT", "DONE", "EVENTS", "SPANS", "Position", "Replay", "WriteAheadLog"]

log = logging.getLogger(__name__)

#: ``fdatasync`` where the platform has it (Linux), ``fsync`` elsewhere (macOS).
_fdatasync = getattr(os, "fdatasync", os.fsync)

SPANS = 1
DONE = 2
CHECKPOINT = 3
EVENTS = 4

_HEADER = struct.Struct("<IIB")
_NAME = re.compile(r"^wal-(\d{8})\.log$")
#: A record larger than this is corruption, not data (requests are capped at 64 MiB).
_MAX_RECORD = 1 << 30

#: (segment number, byte offset after a record): ordered, so "durable up to" compares.
Position = tuple[int, int]
Key = tuple[str, str]


@dataclass
class Replay:
    """What a WAL held when it was opened."""

    spans: list[tuple[int, bytes]] = field(default_factory=list)  # (segment, request)
    #: SPANS and EVENTS records in the order written: (kind, segment, request)
    records: list[tuple[int, int, bytes]] = field(default_factory=list)
    done: dict[Key, float] = field(default_factory=dict)  # key -> wall time emitted
    #: (trace id, span id) -> wall time written, of envelopes that had log-based events
    done_spans: dict[Key, float] = field(default_factory=dict)
    sink_position: tuple[int, int] | None = None
    torn_bytes: int = 0
    corrupt_segments: list[str] = field(default_factory=list)


def _segment_path(directory: Path, number: int) -> Path:
    return directory / f"wal-{number:08d}.log"


def encode_done(entries: list[tuple[Key, float]], sink: tuple[int, int] | None,
                spans: list[tuple[Key, float]] | None = None) -> bytes:
    """Payload of a DONE or CHECKPOINT record: ((trace id, context id), wall time) pairs,
    and ((trace id, span id), wall time) of spans whose log-based events are settled."""
    document: dict[str, object] = {"keys": [[t, c, w] for (t, c), w in entries], "sink": sink}
    if spans:
        document["spans"] = [[t, s, w] for (t, s), w in spans]
    return orjson.dumps(document)


def _read_records(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(type, payload, end offset) of each intact record; stops at the first bad one."""
    data = path.read_bytes()
    offset = 0
    size = len(data)
    while offset + _HEADER.size <= size:
        length, crc, kind = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        end = start + length
        if length > _MAX_RECORD or end > size:
            return
        payload = data[start:end]
        if zlib.crc32(payload, zlib.crc32(bytes((kind,)))) != crc:
            return
        yield kind, payload, end
        offset = end


class WriteAheadLog:
    """Segmented append-only log with group-commit fsync and ordered compaction."""

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int,
                 fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._segments: dict[int, int] = {}  # number -> size in bytes
        self._torn = False  # a failed write could not be cut away: rotate before the next
        self._head = 0  # size of the active segment's checkpoint
        self._pins: dict[int, int] = {}
        self._active = 0
        self._fd = -1
        self._retired: list[int] = []  # fds of rotated segments, closed by sync/close
        self._written: Position = (0, 0)
        self._synced: Position = (0, 0)
        self._checkpoint: Callable[[], bytes] = lambda: encode_done([], None)
        self.bytes_written = 0

    # -- open and replay -----------------------------------------------------------------------
    def open(self) -> Replay:
        """Read back every segment (cutting off a torn tail). Call :meth:`start` next."""
        self.directory.mkdir(parents=True, exist_ok=True)
        replay = Replay()
        numbers = sorted(
            int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m
        )
        for index, number in enumerate(numbers):
            path = _segment_path(self.directory, number)
            end = 0
            for kind, payload, record_end in _read_records(path):
                end = record_end
                if kind == SPANS:
                    replay.spans.append((number, payload))
                    replay.records.append((kind, number, payload))
                elif kind == EVENTS:
                    replay.records.append((kind, number, payload))
                elif kind in (DONE, CHECKPOINT):
                    self._replay_done(payload, replay)
            size = path.stat().st_size
            if end < size:
                if index == len(numbers) - 1:
                    # A torn tail: the last append never completed (so was never acked).
                    replay.torn_bytes = size - end
                    with open(path, "r+b") as handle:
                        handle.truncate(end)
                    size = end
                    log.warning("WAL %s: dropped a torn tail of %d bytes", path.name,
                                replay.torn_bytes)
                else:
                    replay.corrupt_segments.append(path.name)
                    log.error("WAL %s is corrupt after byte %d; records after it are lost",
                              path.name, end)
            self._segments[number] = size
        self._active = numbers[-1] if numbers else 0
        return replay

    def start(self, checkpoint: Callable[[], bytes]) -> None:
        """Start appending to a fresh segment headed by ``checkpoint()``.

        ``checkpoint`` is called again at every rotation, under the log's lock; it must
        not call back into the log.
        """
        self._checkpoint = checkpoint
        with self._lock:
            self._start_segment(self._active + 1)

    @staticmethod
    def _replay_done(payload: bytes, replay: Replay) -> None:
        try:
            document = orjson.loads(payload)
            for trace_id, context_id, when in document.get("keys", ()):
                replay.done[(trace_id, context_id)] = float(when)
            for trace_id, span_id, when in document.get("spans", ()):
                replay.done_spans[(trace_id, span_id)] = float(when)
            sink = document.get("sink")
            if sink is not None:
                position = (int(sink[0]), int(sink[1]))
                if replay.sink_position is None or position > replay.sink_position:
                    replay.sink_position = position
        except (orjson.JSONDecodeError, TypeError, ValueError, IndexError) as exc:
            log.error("WAL: unreadable done record ignored: %s", exc)

    def _start_segment(self, number: int) -> None:
        path = _segment_path(self.directory, number)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._active = number
        self._segments[number] = 0
        self._written = (number, 0)
        self._write(CHECKPOINT, self._checkpoint())
        self._head = self._segments[number]
        if self.fsync:
            # The new file's directory entry must be durable before acks depend on it.
            os.fsync(self._fd)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._synced = self._written

    # -- appends -------------------------------------------------------------------------------
    def _write(self, kind: int, payload: bytes) -> Position:
        header = _HEADER.pack(len(payload), zlib.crc32(payload, zlib.crc32(bytes((kind,)))), kind)
        expected = len(header) + len(payload)
        before = self._segments[self._active]
        try:
            written = os.writev(self._fd, (header, payload))
            while written < expected:  # writev may be short on signals; finish the record
                tail = (header + payload)[written:]
                written += os.write(self._fd, tail)
        except OSError:
            # A full disk stops a record part-way: cut the segment back to where the record
            # began, so what is appended once space returns follows whole records (a torn
            # record in the middle would end the replay there, losing what comes after).
            try:
                os.ftruncate(self._fd, before)
            except OSError:
                log.exception("WAL: cannot cut a torn record from segment %d; the next "
                              "record starts a new segment", self._active)
                self._torn = True
            raise
        size = before + expected
        self._segments[self._active] = size
        self.bytes_written += expected
        self._written = (self._active, size)
        return self._written

    def append(self, kind: int, payload: bytes) -> Position:
        """Append a record (rotating first if the segment is full); its end position."""
        with self._lock:
            if self._torn or self._segments[self._active] - self._head >= self.segment_bytes:
                self._rotate()
                self._torn = False
            return self._write(kind, payload)

    @property
    def active_segment(self) -> int:
        return self._active

    def sync(self, position: Position) -> None:
        """Return once everything up to ``position`` is on disk (no-op without fsync)."""
        if not self.fsync or position <= self._synced:
            return
        with self._sync_lock:
            if position <= self._synced:
                return
            with self._lock:
                fd, target = self._fd, self._written
                retired, self._retired = self._retired, []
            _fdatasync(fd)
            for old in retired:
                os.close(old)
            if target > self._synced:
                self._synced = target

    def _rotate(self) -> None:
        old = self._fd
        if self.fsync:
            _fdatasync(old)
            self._synced = max(self._synced, self._written)
        before = (self._active, self._written, self._head)
        try:
            self._start_segment(self._active + 1)
        except BaseException:
            self._keep_segment(old, *before)
            raise
        self._retired.append(old)

    def _keep_segment(self, fd: int, active: int, written: Position, head: int) -> None:
        """A new segment that could not be made whole (its file not created: too many open
        files, a full disk; its checkpoint not written or not synced) is dropped and the old
        one stays the active segment, as if no rotation had been tried. Retiring the old one
        would close the descriptor appends still use (its number then reused by another file,
        which would get the WAL's records), and a segment without its checkpoint would let
        compaction delete the last one (the written envelopes and the sink position)."""
        number = active + 1
        if self._fd != fd and self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        with contextlib.suppress(OSError):
            _segment_path(self.directory, number).unlink()
        self._segments.pop(number, None)
        self._fd, self._active, self._written, self._head = fd, active, written, head

    # -- pins and compaction -------------------------------------------------------------------
    def pin(self, segment: int) -> None:
        self._pins[segment] = self._pins.get(segment, 0) + 1

    def unpin(self, segment: int) -> None:
        count = self._pins.get(segment, 0) - 1
        if count > 0:
            self._pins[segment] = count
        else:
            self._pins.pop(segment, None)

    def compact(self, *, idle_rotate_bytes: int = 1 << 20) -> int:
        """Delete the oldest unpinned segments, and rotate the active one away when nothing
        is open and it holds ``idle_rotate_bytes`` past its checkpoint (a checkpoint may be
        large, so it does not count). Returns the number of segments deleted."""
        with self._lock:
            if not self._pins and self._segments[self._active] - self._head >= idle_rotate_bytes:
                self._rotate()
            deleted = 0
            for number in sorted(self._segments):
                if number == self._active or self._pins.get(number):
                    break
                with contextlib.suppress(FileNotFoundError):
                    _segment_path(self.directory, number).unlink()
                del self._segments[number]
                deleted += 1
            return deleted

    @property
    def size_bytes(self) -> int:
        return sum(self._segments.values())

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def close(self) -> None:
        with self._sync_lock, self._lock:
            if self._fd >= 0:
                if self.fsync:
                    _fdatasync(self._fd)
                os.close(self._fd)
                self._fd = -1
            for old in self._retired:
                os.close(old)
            self._retired = []
