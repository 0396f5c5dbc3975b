"""The bundle store in a process of its own (``store.writer: process``, the default).

Turning a bundle into rows and binding SQL parameters hold the GIL; in a child process they
no longer compete with the emitter's rebuild. The parent hands each batch's JSON Lines lines
(already encoded) over a pipe and waits, the GIL released, for the child's answer; the
pipeline records the batch written in its WAL only after the child answered that it
committed, exactly as with the store on a thread. A child that dies (or answers nothing) is
an ordinary store failure: the pipeline retries the batch with its backoff, and the next
write starts a new child. Store writes are idempotent, so a batch committed just before a
crash and written again duplicates nothing.

The protocol, both ways: a 4-byte big-endian length, then that many bytes. A request is an
index (a JSON array, one entry per line: the line's length, then where in the line each
member the rows read begins and ends, see :func:`encode_indexed`), ``\\n``, and the batch's
lines (each ends with ``\\n``). The child decodes only those members (the rows never read
the context windows, events and the like, 40% of a small bundle's bytes) and stores the full
line as the envelope's ``bundle``; a line indexed by its length alone is decoded whole. An
answer is JSON: ``{"ok": true, "left_out": {reason: count}}`` (the envelopes this batch left
out, see ``Store.write``) or ``{"error": text}``. The child's first answer, before any
request, says whether the store opened.

A batch may also come in parts while the emitter is still rebuilding it (see
:meth:`StoreProcess.write_part`): each part's request starts with a head (``P`` or, for the
last part, ``C``; the batch's number and the part's, ``:`` between; ``\n``). The child writes
each part as it comes into one open transaction (its work overlaps the rebuild of the rest of
the batch) and answers only the last part, after the commit. Nothing of a batch is committed
unless all its parts were written (:class:`BatchInParts`): the parent writes a batch whose
last answer is an error again whole, and a crash of either process between two parts leaves
the batch to the processor's WAL replay (or JSON Lines recovery), as for a batch sent whole.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import sqlite3
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

import orjson

from .._store import Store
from .._store._rows import SECTIONS
from ..exceptions import ConfigError
from ..rebuild._encode import encode_bundle
from ._store_sink import StoreSink

__all__ = ["BatchInParts", "StoreProcess", "bind_plainly", "decode_lines", "encode_indexed",
           "part_head", "request", "write_lines"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")


class StoreChildError(Exception):
    """The store's child process died, or broke the protocol."""


def _send(out: IO[bytes], payload: bytes) -> None:
    out.write(_LENGTH.pack(len(payload)))
    out.write(payload)
    out.flush()


def _receive(inp: IO[bytes]) -> bytes | None:
    """One frame, or None at the end of the stream (the other side is gone)."""
    head = inp.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    payload = inp.read(size)
    if len(payload) < size:
        return None
    return payload


def encode_indexed(bundle: dict[str, Any]) -> tuple[bytes, list[int] | None]:
    """``encode_bundle(bundle)``, and where the members :data:`SECTIONS` names are in it:
    ``[start, end, start, end, ...]`` (``line[start:end]`` is one ``"key":value``), or
    None when the line came from ``encode_bundle``'s repairing path (then decoded whole).

    The line is the same bytes: each member is encoded alone, as orjson writes it inside
    the bundle (``{key: value}`` without its braces: same escaping, same nesting depth, so
    a member orjson refuses here it refuses in the bundle too), joined by commas."""
    if type(bundle) is not dict:
        return encode_bundle(bundle), None
    members: list[bytes] = []
    spans: list[int] = []
    at = 1  # after "{"
    try:
        for key, value in bundle.items():
            member = orjson.dumps({key: value})[1:-1]
            if key in SECTIONS:
                spans.append(at)
                spans.append(at + len(member))
            at += len(member) + 1
            members.append(member)
    except orjson.JSONEncodeError:  # a key or value only the repairing path can write
        return encode_bundle(bundle), None
    return b"{" + b",".join(members) + b"}\n", spans


def request(lines: Sequence[bytes], members: Sequence[list[int] | None] | None,
            part: bytes = b"") -> bytes:
    """A request's payload: the index, then the lines (``members``: each line's from
    :func:`encode_indexed`, or None to decode every line whole); ``part``: the head of a
    part of a batch (:func:`part_head`), empty for a whole batch."""
    if members is None:
        index = [[len(line)] for line in lines]
    else:
        index = [[len(line), *spans] if spans else [len(line)]
                 for line, spans in zip(lines, members, strict=True)]
    return b"".join((part, orjson.dumps(index), b"\n", *lines))


def part_head(batch: int, number: int, last: bool) -> bytes:
    """The head of part ``number`` (0, 1, ...) of batch ``batch``: ``P`` (more parts follow,
    no answer) or ``C`` (the last: commit, and answer for the whole batch), the two numbers,
    a newline."""
    return b"%c%d:%d\n" % (67 if last else 80, batch, number)


class StoreProcess:
    """``sink``'s writes, run in a child process (with :class:`StoreSink`'s interface; the
    ``sink`` itself serves readers in this process)."""

    name = "store"

    def __init__(self, sink: StoreSink) -> None:
        self.sink = sink
        #: envelopes the child left out (see ``Store.write``), summed over its restarts
        self.left_out: dict[str, int] = {}
        #: how many times a child was started (the first one included)
        self.starts = 0
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    # -- the child -----------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen[bytes]:
        # its own session: a Ctrl-C meant for the processor must not kill the store before
        # the processor drains into it; the URL (perhaps with a password) goes over the pipe
        child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, close_fds=True, start_new_session=True)
        assert child.stdin is not None and child.stdout is not None
        with contextlib.suppress(OSError):  # it died already: reported below
            _send(child.stdin, orjson.dumps({"url": self.sink.url, "durable": self.sink.durable,
                                             "retention": self.sink.retention}))
        answer = _receive(child.stdout)
        if answer is None:
            child.wait()
            raise StoreChildError(f"the store's process exited at start ({child.returncode})")
        reply = orjson.loads(answer)
        if "error" in reply:
            self._stop(child)
            raise ConfigError("store.url", reply["error"])
        self.starts += 1
        log.debug("store: process %d started", child.pid)
        return child

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        assert child.stdin is not None
        with contextlib.suppress(OSError):
            child.stdin.close()  # the child sees the end of its input and exits
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            log.warning("store: process %d did not exit; killing it", child.pid)
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    # -- the sink ------------------------------------------------------------------------------
    def open(self) -> None:
        """Start the child (it connects and migrates); a store it cannot open is a
        configuration error."""
        with self._lock:
            if self._child is None:
                self._child = self._start()

    @property
    def opened(self) -> Store:
        """A store opened in this process, for readers (the web page)."""
        self.open()
        return self.sink.opened

    def write(self, batch: Sequence[tuple[tuple[str, str], dict[str, Any], bytes]],
              members: Sequence[list[int] | None] | None = None) -> None:
        """``members``: where each line's members are (:func:`encode_indexed`), if known."""
        with self._lock:
            self._exchange(request([line for _, _, line in batch], members), answer=True)

    def write_part(self, part: Sequence[tuple[tuple[str, str], dict[str, Any], bytes]],
                   members: Sequence[list[int] | None] | None, batch: int, number: int,
                   last: bool) -> None:
        """Part ``number`` of batch ``batch`` (a number the caller never reuses): the child
        writes the parts of a batch as they come, in one transaction it commits at the last
        part; only the last waits for an answer (for the whole batch). Any failure (of this
        part, of an earlier one, a child restarted between them) raises at the last part at
        the latest, and nothing of the batch is committed: the caller writes the whole batch
        again (:meth:`write`)."""
        with self._lock:
            self._exchange(request([line for _, _, line in part], members,
                                   part_head(batch, number, last)), answer=last)

    def _exchange(self, payload: bytes, *, answer: bool) -> None:
        """Send a request to the child (started if it is not running); with ``answer``, wait
        for the child's and raise if it failed. Under ``self._lock``."""
        if self._child is None or self._child.poll() is not None:
            if self._child is not None:
                log.warning("store: process %d exited (%s); starting another",
                            self._child.pid, self._child.returncode)
                self._stop(self._child)
                self._child = None
            self._child = self._start()
        child = self._child
        assert child.stdin is not None and child.stdout is not None
        try:
            _send(child.stdin, payload)
            reply = _receive(child.stdout) if answer else b"{}"
        except OSError as exc:  # a broken pipe: the child died
            reply = None
            log.debug("store: pipe to the process failed: %s", exc)
        if reply is None:
            child.wait()
            raise StoreChildError(f"the store's process died ({child.returncode})")
        if not answer:
            return
        decoded = orjson.loads(reply)
        if "error" in decoded:
            raise StoreChildError(decoded["error"])
        for reason, count in decoded["left_out"].items():
            self.left_out[reason] = self.left_out.get(reason, 0) + count

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._stop(self._child)
                self._child = None
        self.sink.close()


def bind_plainly() -> None:
    """In the child only: let SQLite's driver bind None and bool without its adaptation
    protocol.

    The sqlite3 module binds int, float and str directly, but passes every other value
    (None and bool among them) through its adapter lookup, whose failing ``__adapt__`` and
    ``__conform__`` attribute lookups cost more than the binding: a quarter of the store's
    instructions for an envelope with a selection of 100 items (benchmarks/store.md). With an
    adapter registered, the lookup finds it at once. The values bound are the same: None
    stays None (NULL; ``{}.get`` returns None), a bool becomes the int SQLite stored anyway
    (``operator.index``: 1 or 0).
    The registry is global to the process, hence in the store's own process only."""
    sqlite3.register_adapter(type(None), {}.get)  # type: ignore[arg-type] # C, returns None
    sqlite3.register_adapter(bool, operator.index)  # the exact int, without int()'s parsing


def decode_lines(payload: bytes) -> list[tuple[tuple[str, str], dict[str, Any], bytes]]:
    """A request's lines as the parent sends them (see :func:`request`; its index first): of
    each line, the members the rows read decoded, and the line itself."""
    head, _, lines = payload.partition(b"\n")
    entries = []
    at = 0
    loads = orjson.loads
    for spec in loads(head):
        end = at + spec[0]
        line = lines[at:end]
        at = end
        if len(spec) == 1:
            entries.append((("", ""), loads(line), line))
            continue
        members = [line[spec[i]:spec[i + 1]] for i in range(1, len(spec), 2)]
        entries.append((("", ""), loads(b"{" + b",".join(members) + b"}"), line))
    if at != len(lines):
        raise ValueError(f"a request of {len(lines)} bytes of lines indexed {at}")
    return entries


def write_lines(sink: StoreSink, payload: bytes) -> None:
    """One batch as the parent sends it (see :func:`request`): of each line, the members the
    rows read decoded, and the line stored whole."""
    sink.write(decode_lines(payload))


class BatchInParts:
    """The child's side of :meth:`StoreProcess.write_part`: the parts of one batch written as
    they come, in one transaction, committed at the last part.

    Nothing of a batch is committed unless every part of it was written: a part missing (a
    child started between two parts has only the later ones; the parent gave a batch up for
    another) or a part that failed rolls the whole transaction back, and the last part's
    answer is an error, so the parent writes the whole batch again. Data the database refuses
    (or has no room for) in some part is not an error of the batch: the batch is written
    again here, whole, by :meth:`StoreSink.write`, which splits it and leaves the refused
    envelopes out, as for a batch sent whole (its entries are kept until the last part)."""

    def __init__(self, sink: StoreSink) -> None:
        self.sink = sink
        self.batch: int | None = None
        self.expected = 0
        self.entries: list[tuple[tuple[str, str], dict[str, Any], bytes]] = []
        #: the first failure of this batch's parts; ``refused``: a data (or room) error
        self.error: Exception | None = None
        self.refused = False

    def reset(self) -> None:
        """Forget the open batch (rolled back)."""
        if self.batch is not None:
            self.sink.opened.rollback_begun()
        self.batch, self.expected, self.entries = None, 0, []
        self.error, self.refused = None, False

    def take(self, payload: bytes) -> bool:
        """One part (never raises: a failure is kept for the last part's answer); whether it
        was the last."""
        head, _, rest = payload.partition(b"\n")
        last = head[:1] == b"C"
        try:
            batch, number = (int(n) for n in head[1:].split(b":"))
        except ValueError:
            batch, number = -1, -1
        if batch != self.batch:
            self.reset()
            self.batch = batch
        if number != self.expected and (self.error is None or self.refused):
            self.sink.opened.rollback_begun()
            self.error = StoreChildError(f"part {number} of batch {batch} without part "
                                         f"{self.expected}: the batch is written again whole")
            self.refused = False
        self.expected = number + 1
        if self.error is not None and not self.refused:
            return last
        store = self.sink.opened
        try:
            entries = decode_lines(rest)
        except Exception as exc:  # noqa: BLE001 - answered at the last part
            store.rollback_begun()
            self.error, self.refused = exc, False
            return last
        self.entries.extend(entries)
        if self.error is not None:  # refused earlier: kept to be written whole at the end
            return last
        try:
            store.write_begun([bundle for _, bundle, _ in entries],
                              [line for _, _, line in entries])
        except Exception as exc:  # noqa: BLE001 - rolled back; answered at the last part
            self.error = exc
            self.refused = store._cannot_store(exc) is not None
        return last

    def finish(self) -> None:
        """After the last part: commit the batch, or write it whole when the database
        refused some of its data; raise when the batch must be sent again."""
        try:
            store = self.sink.opened
            if self.error is None:
                try:
                    store.commit_begun()
                except Exception as exc:
                    if store._cannot_store(exc) is None:
                        raise
                    self.sink.write(self.entries)  # no room for all of it: in parts
                    return
                self.sink.prune()
                return
            if not self.refused:
                raise self.error
            log.warning("store: the database refused part of a batch (%s); writing the batch "
                        "whole", self.error)
            self.sink.write(self.entries)
        finally:
            self.reset()


def _serve() -> int:
    """The child: open the store, then write each batch it is sent until its input ends."""
    bind_plainly()
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing else may write into the protocol
    settings = _receive(inp)
    if settings is None:
        return 1
    config = orjson.loads(settings)
    sink = StoreSink(config["url"], durable=config["durable"], retention=config["retention"])
    try:
        sink.open()
    except ConfigError as exc:
        _send(out, orjson.dumps({"error": str(exc).removeprefix("store.url: ")}))
        return 1
    _send(out, b'{"ok":true}')
    store = sink.opened
    parts = BatchInParts(sink)
    while True:
        payload = _receive(inp)
        if payload is None:
            break
        kind = payload[:1]
        if kind == b"P":  # more parts follow: no answer
            parts.take(payload)
            continue
        try:
            before = dict(store.left_out)
            if kind == b"C":
                parts.take(payload)
                parts.finish()
            else:  # a whole batch (a batch in parts left open is given up)
                parts.reset()
                write_lines(sink, payload)
            left_out = {reason: count - before.get(reason, 0)
                        for reason, count in store.left_out.items()
                        if count != before.get(reason, 0)}
            answer = {"ok": True, "left_out": left_out}
        except Exception as exc:  # noqa: BLE001 - reported; the parent retries the batch
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        _send(out, orjson.dumps(answer))
    parts.reset()
    sink.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(_serve())
