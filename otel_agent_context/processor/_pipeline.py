"""The pipeline: receivers hand it requests; it makes them durable, buffers, rebuilds, writes.

::

    ingest(request) ── decode ──► WAL append + buffer add (one lock) ──► fsync ──► ack
    ingest_logs(request) ─ decode ─► WAL append + event store ─┘
                                         │ finished envelopes
                                         ▼
    sweeper (timeouts) ──────────► queue ──► emitter: rebuild → JSON Lines ─┬─► store's thread ──┐
                                                                          └─► each other sink's │
                                                       DONE record + metrics ◄── thread ◄───────┘
                                                                └─► WAL compaction

Backpressure: a request is refused (UNAVAILABLE / 503, retry after ``retry_after``)
before anything is done with it when the queue to the sinks, or the forward queue, is
full, or when what it brings would take one past its cap: the envelopes it may finish,
its bytes against its part of ``memory.max_bytes`` (``_memory``); checked under the lock
the buffer changes under, before the WAL append. Everything acknowledged is in the WAL;
a DONE record is written only after every sink took the bundle, so a crash at any point
replays exactly what is not written.

The emitter writes JSON Lines itself; every other sink (the OTLP log sink, a sink passed in)
has a thread and a queue of its own, so one that stalls does not hold up the file. A batch
is recorded written (DONE, with the JSON Lines position just after it) when the last sink
takes it, batches in the order they were written; until then its envelopes still count
against the queue and memory caps, so a stalled sink ends in backpressure, never in growth.
Lines past the last recorded position at a crash are recovered from the file and handed to
the other sinks at the next start (``_catch_up``).

The envelopes a request finishes are queued before its fsync, so the emitter rebuilds them
while the disk syncs; nothing of them leaves the process (no line, no store row) until that
fsync has answered (``_hold``, ``_release``, ``_await_sync``). When it failed the request is
refused, and they are written all the same: their spans are in memory, the envelopes are
done (the sender's retry is a duplicate), and waiting for a replay would lose them until a
restart. A batch waiting for a sync that stalls goes behind the envelopes ready to be
written (a timed-out one, a replayed one): they do not wait for another request's disk.

Log-based context events (``_decode_logs``, ``_events``) take the same road: durable in the
WAL (``EVENTS`` records) before the ack, then put on their span in the buffer, or held
until it comes; replay reads span and event records in the order they were written.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.internal import api_implementation

from .._measure import Measurement, measure
from .._version import __version__
from ..rebuild._boundary import DUPLICATE_ID, DUPLICATE_SPAN, FOREIGN_TRACE
from ..rebuild._completion import (
    ADDED,
    CONFLICT,
    DUPLICATE,
    FOREIGN,
    LATE,
    REASON_SHUTDOWN,
    Finished,
    TraceBuffer,
)
from ..rebuild._encode import encode_bundle, encode_record
from ..rebuild._events import EventStore
from ._config import ProcessorConfig
from ._decode import (
    Decoded,
    InvalidRequest,
    decode_cache_bytes,
    decode_request,
    parse_protobuf,
    set_decode_cache_bytes,
)
from ._decode_logs import DecodedLogs, decode_logs_request, parse_logs_protobuf
from ._forward import Forwarder
from ._memory import KEY_COST, PARTS, MemoryCaps
from ._metrics import MetricsRegistry
from ._sinks import JsonlSink, OtlpLogSink, Sink, bundle_key
from ._store_process import StoreProcess, encode_indexed
from ._store_sink import StoreSink
from ._wal import DONE, EVENTS, SPANS, WriteAheadLog, encode_done

__all__ = ["Backpressure", "IngestResult", "Pipeline", "RebuildFunction", "RequestTooLarge"]

log = logging.getLogger(__name__)

RebuildFunction = Callable[..., dict[str, Any]]

_BATCH = 256
#: With store.writer: process, a batch's lines go to the store's process in parts of about
#: this many bytes while the emitter is still rebuilding the batch (benchmarks/store.md).
_STORE_PART_BYTES = 256 * 1024
#: a WAL sync this long (seconds) has stalled: the emitter's batch waiting for it goes behind
#: envelopes ready to be written (a sync takes milliseconds: 3-16 ms on the test machine)
_STALLED = 0.2
#: ``_emit``'s answer for a batch put back behind ready envelopes
_LATER = object()
_MAX_SINK_BACKOFF = 5.0
DEAD_LETTER = "dead-letter.jsonl"


class Backpressure(Exception):
    """The processor cannot take more now; the client should retry after ``retry_after``."""

    def __init__(self, reason: str, retry_after: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class RequestTooLarge(InvalidRequest):
    """A request that could never fit in its share of ``memory.max_bytes``: refused for good
    (413 / RESOURCE_EXHAUSTED without RetryInfo), as one above the size limit is."""


@dataclass(slots=True)
class IngestResult:
    """What an export request amounted to: for the OTLP response.

    ``message`` names rejected spans and repaired values; it is sent (as partial success)
    whenever it is not empty, with ``rejected`` 0 when nothing was refused: a warning.
    """

    spans: int
    rejected: int
    message: str


class _ProblemLog:
    """Tells the operator what senders get wrong: one WARNING at most every ``every``
    seconds, with the counts per ``service.name`` and reason since the last one."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._example: str = ""
        self._next = 0.0

    def add(self, problems: dict[tuple[str, str], int], example: str) -> None:
        with self._lock:
            for key, count in problems.items():
                self._counts[key] = self._counts.get(key, 0) + count
            self._example = self._example or example
        self.flush()

    def flush(self, force: bool = False) -> None:
        """Log what was counted since the last warning, once ``every`` seconds have passed
        since it (or now: ``force``, at shutdown). The sweeper calls this too, so counts
        that arrive within a window are told at its end, not when the next problem comes."""
        with self._lock:
            if not self._counts:
                return
            now = self.clock()
            if now < self._next and not force:
                return
            counts, self._counts = self._counts, {}
            example, self._example = self._example, ""
            self._next = now + self.every
        pairs = sorted(counts.items())
        summary = ", ".join(f"{_short(service) or '(no service.name)'}: {count} {reason}"
                            for (service, reason), count in pairs[:_MAX_PAIRS])
        if len(pairs) > _MAX_PAIRS:
            summary += f", and {len(pairs) - _MAX_PAIRS} more services and reasons"
        log.warning("off-spec telemetry received (%s); for example: %s", summary,
                    _short(example, 1000))


#: what one warning lists at most: a sender's service names and counts are its own, so a
#: line stays readable (40 names of 200 KB made one line of 8 MB)
_MAX_PAIRS = 20


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


#: serve's log name for a new span of an envelope already written (not a repair: the bundle
#: is out; ``context_processor_spans_late_total`` counts it)
LATE_SPAN = "late_span"


def _problem(problems: dict[tuple[str, str], int], accepted: Any, reason: str) -> None:
    """Count a problem the buffer found (a foreign or conflicting span) for serve's log."""
    key = (str(accepted.view.resource.get("service.name", "")), reason)
    problems[key] = problems.get(key, 0) + 1


def _default_rebuild() -> RebuildFunction:
    from ..rebuild import rebuild_envelope

    return rebuild_envelope  # type: ignore[no-any-return]


def _span_json(span: Any) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id, "span_id": span.span_id, "name": span.name,
        "parent_span_id": span.parent_span_id,
        "start_time_unix_nano": span.start_time_unix_nano,
        "end_time_unix_nano": span.end_time_unix_nano,
        "attributes": dict(span.attributes),
        "events": [{"name": e.name, "time_unix_nano": e.time_unix_nano,
                    "attributes": dict(e.attributes)} for e in span.events],
    }



def _repr(value: object) -> str:
    """``repr(value)``, or its type's name when its ``__repr__`` raises too."""
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a dead letter must not raise for a bad exception
        return f"<{type(value).__name__}>"


def _dead_letter(finished: Finished, exc: BaseException) -> bytes:
    """The spans of an envelope the rebuild (or its encoding) raised on, as one line: never
    raises, so the envelope is handled once, never retried forever. A line that cannot carry
    the spans says how many it lost and why; one the encoder refuses altogether is written by
    the standard library's ``json``."""
    record = {"trace_id": finished.key[0], "context_id": finished.key[1],
              "reasons": list(finished.reasons), "error": _repr(exc)}
    try:
        return encode_record({**record, "spans": [_span_json(s) for s in finished.spans]})
    except Exception as again:  # noqa: BLE001 - the spans themselves cannot be written
        lost = {**record, "spans_lost": len(finished.spans), "dead_letter_error": _repr(again)}
    try:
        return encode_record(lost)
    except Exception:  # noqa: BLE001 - nor the record: plain text, ASCII, nothing to refuse
        return json.dumps(lost, default=_repr, ensure_ascii=True).encode() + b"\n"


@dataclass(eq=False)
class _Flight:
    """A batch the JSON Lines file has, on its way to the other sinks."""

    batch: list[Finished]
    entries: list[tuple[tuple[str, str], dict[str, Any], bytes]]
    partial_reasons: list[str]
    #: the JSON Lines position just after the batch (recorded in its DONE record)
    position: tuple[int, int]
    #: the sink threads, and the emitter's store step, that do not have it yet
    waiting: int


@dataclass
class _Pending:
    """A batch every other sink has, waiting for the store's thread."""

    batch: list[Finished]
    entries: list[tuple[tuple[str, str], dict[str, Any], bytes]]
    partial_reasons: list[str]
    #: the store's writes of the batch: one, or each of its parts (store.writer: process)
    futures: list[Future[None]]
    flight: _Flight
    #: where the members the store's rows read are in each line (store.writer: process)
    members: list[list[int] | None] | None = None


class _SinkThread:
    """One sink's thread: writes the batches handed to it in order, each retried with
    backoff until it is taken (or the pipeline stops and gives up: the WAL keeps it)."""

    def __init__(self, pipeline: Pipeline, sink: Sink) -> None:
        self.pipeline = pipeline
        self.sink = sink
        self.queue: collections.deque[_Flight] = collections.deque()
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name=f"otel-ac-sink-{sink.name}",
                                       daemon=True)

    def put(self, flight: _Flight) -> None:
        with self.cond:
            self.queue.append(flight)
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    def _run(self) -> None:
        pipeline = self.pipeline
        while True:
            with self.cond:
                while not self.queue and not self.stopping:
                    self.cond.wait()
                if not self.queue:
                    return
                flight = self.queue[0]
            try:
                if not pipeline._write_retrying(self.sink, flight.entries, self.cond):
                    return  # stopping with the sink still failing: the WAL keeps the rest
                with self.cond:
                    self.queue.popleft()
                if not pipeline._landed(flight):
                    return
            except Exception:  # noqa: BLE001 - the thread must outlive any one batch
                log.exception("sink %s: unexpected error", self.sink.name)
                with self.cond:
                    self.cond.wait(1.0)


class Pipeline:
    """Owns the WAL, the buffer, the queue to the sinks and the two worker threads."""

    def __init__(
        self,
        config: ProcessorConfig,
        metrics: MetricsRegistry,
        *,
        rebuild: RebuildFunction | None = None,
        sinks: Sequence[Sink] | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self._rebuild = rebuild
        self._lock = threading.Lock()
        #: the byte cap of each part of memory.max_bytes (see _memory)
        self.memory = MemoryCaps.split(config.max_memory)
        set_decode_cache_bytes(self.memory.decode_cache)
        self.wal = WriteAheadLog(config.wal_dir, segment_bytes=config.segment_bytes,
                                 fsync=config.wal_fsync)
        self.events = EventStore(
            orphan_timeout=config.orphan_timeout,
            max_events=config.max_events,
            max_bytes=min(config.max_event_bytes, self.memory.events),
            remember_for=config.dedupe_window,
            remember_max=min(config.max_spans, self.memory.remembered_spans),
            pin=self.wal.pin,
            unpin=self.wal.unpin,
            on_orphaned=self._count_orphaned,
        )
        self.buffer = TraceBuffer(
            envelope_timeout=config.envelope_timeout,
            orphan_timeout=config.orphan_timeout,
            max_traces=config.max_traces,
            max_spans=config.max_spans,
            dedupe_window=config.dedupe_window,
            dedupe_max=min(config.dedupe_max, self.memory.remembered_envelopes),
            on_pin=self.wal.pin,
            max_events=config.max_events,
            on_span=self.events.on_span,
            on_finish=self.events.on_finish,
            max_bytes=self.memory.buffer,
            dedupe_bytes=self.memory.remembered * 2 // 3,
        )
        self.events.buffer = self.buffer
        self.jsonl = JsonlSink(config.out_dir, max_file_bytes=config.max_file_bytes,
                               fsync=config.output_fsync)
        extra: list[Sink] = list(sinks or ())
        self.store: StoreSink | StoreProcess | None = (
            StoreSink(config.store_url, durable=config.output_fsync,
                      retention=config.store_retention)
            if config.store_url is not None else None)
        if self.store is not None and config.store_writer == "process":
            self.store = StoreProcess(self.store)
        if config.otlp_logs is not None:
            extra.append(OtlpLogSink(config.otlp_logs, timeout=config.otlp_logs_timeout))
        self.sinks: list[Sink] = [self.jsonl, *extra]
        # JSON Lines on the emitter; each other sink on a thread of its own
        self._sink_threads = [_SinkThread(self, sink) for sink in extra]
        #: batches written to JSON Lines, not yet recorded written (oldest first)
        self._flights: collections.deque[_Flight] = collections.deque()
        self._flights_lock = threading.Lock()
        self._mark_lock = threading.Lock()
        # The store writes on its own thread, one batch behind the emitter: SQLite runs its
        # statements with the GIL released, so its inserts and fsync overlap the rebuild of
        # the next batch. A batch is recorded written only when the store has it too. With
        # store.writer: process (the default) this thread only hands the batch's lines to the
        # store's child process and waits, the GIL released, for its answer; and the batch
        # goes in parts while the emitter rebuilds it (_STORE_PART_BYTES): the child writes
        # each part into one open transaction, so when the emitter is done, only the last
        # part and the commit are left (a part failing: nothing committed, all sent again).
        self._store_pool = (ThreadPoolExecutor(1, thread_name_prefix="otel-ac-store")
                            if self.store is not None else None)
        self._pending: _Pending | None = None
        #: the number of the last batch sent to the store's process in parts
        self._store_batch = 0
        #: whole batches ``finish_pending`` sent the store again: each rolls back the parts of
        #: a batch begun before it
        self._store_rewrites = 0
        self.forwarder = (
            Forwarder(config.forward, queue_size=config.forward_queue_size,
                      max_request_bytes=config.forward_max_request_bytes,
                      max_bytes=self.memory.forward)
            if config.forward is not None else None
        )
        self._queue: collections.deque[Finished] = collections.deque()
        self._in_batch = 0
        #: ids of queued envelopes whose request's WAL sync has not answered; under ``_cond``
        self._unsynced: set[int] = set()
        self._cond = threading.Condition()
        self._stop_sweeper = threading.Event()
        self._emitter_stop = False
        self._give_up_at: float | None = None
        self.accepting = False
        self.problems = _ProblemLog()
        self._marked_position: tuple[int, int] | None = None
        self._threads: list[threading.Thread] = []
        self._storage_warned_at = 0.0
        self._register_gauges()

    # -- start ---------------------------------------------------------------------------------
    def open(self, *, workers: bool = True) -> None:
        """Replay the WAL (before anything listens), then start the worker threads.

        ``workers=False`` leaves the emitter and sweeper unstarted (benchmarks drive
        :meth:`emit_pending` themselves to time ingest and emission apart).
        """
        if self._rebuild is None:
            self._rebuild = _default_rebuild()
        self.jsonl.open()
        if self.store is not None:
            self.store.open()
        replay = self.wal.open()
        now = time.time()
        for key, when in replay.done.items():
            self.buffer.remember_done(key, when)
        recovered_bundles = self.jsonl.recover(replay.sink_position)
        recovered = [key for key, _, _ in recovered_bundles]
        for key in recovered:
            self.buffer.remember_done(key, now)
        for (trace_id, span_id), when in replay.done_spans.items():
            self.events.forget_written(trace_id, span_id, when)
        if recovered:
            log.info("recovery: %d bundles were written but not yet recorded in the WAL",
                     len(recovered))
        # Until the other sinks have the recovered bundles, the recorded position stays
        # before them: a crash meanwhile finds them in the file again.
        self._marked_position = (replay.sink_position if recovered_bundles
                                 else self.jsonl.position)
        self.wal.start(self._checkpoint)
        # Written envelopes are skipped whatever their age (the dedupe window only bounds
        # how long they are remembered for retries from now on).
        written = set(replay.done).union(recovered)
        finished: list[Finished] = []
        replayed = replayed_events = 0
        with self._lock:
            for kind, segment, payload in replay.records:
                if kind == EVENTS:
                    replayed_events += self._replay_events(segment, payload, finished)
                    continue
                try:
                    decoded = decode_request(payload, parse_protobuf(payload))
                except InvalidRequest:
                    log.error("WAL: an unreadable span record in segment %d skipped", segment)
                    continue
                for accepted in decoded.accepted:
                    view = accepted.view
                    if (view.trace_id, accepted.context_id) in written:
                        self.events.forget_written(view.trace_id, view.span_id)
                        continue
                    outcome = self.buffer.add(accepted, segment, finished)
                    if outcome not in (DUPLICATE, LATE, CONFLICT):
                        replayed += 1
                    else:
                        self.events.span_done(view.trace_id, view.span_id)
                self.buffer.settle(finished)  # a request's batch, as when it came
            self.wal.compact()
        if recovered_bundles:
            self._catch_up(recovered_bundles)
        if replayed:
            log.info("recovery: %d spans replayed from the WAL", replayed)
            self.metrics.self.inc("context_processor_wal_replayed_spans_total", (), replayed)
        if replayed_events:
            log.info("recovery: %d log-based context events replayed from the WAL",
                     replayed_events)
        self._enqueue(finished)
        if self.forwarder is not None:
            self.forwarder.start()
        for sink_thread in self._sink_threads:
            sink_thread.thread.start()
        if workers:
            for target, name in ((self._emit_loop, "otel-ac-emit"),
                                 (self._sweep_loop, "otel-ac-sweep")):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
        self.accepting = True

    def _replay_events(self, segment: int, payload: bytes, finished: list[Finished]) -> int:
        try:
            decoded = decode_logs_request(payload, parse_logs_protobuf(payload))
        except InvalidRequest:
            log.error("WAL: an unreadable event record in segment %d skipped", segment)
            return 0
        add = self.events.add
        return sum(add(event, segment, finished) not in (DUPLICATE, LATE)
                   for event in decoded.events)

    def emit_pending(self) -> int:
        """Write everything queued, in this thread (for benchmarks); how many envelopes."""
        written = 0
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            self._emit(batch)
            written += len(batch)
        self.finish_pending()
        while self._flights:  # the other sinks' threads
            time.sleep(0.001)
        return written

    def _checkpoint(self) -> bytes:
        # Called by the WAL under its lock, at start and at rotations (which happen inside
        # appends made under self._lock, so the buffer is safe to read). The position is the
        # one of the last DONE record: bundles past it may be unrecorded, recovery looks.
        return encode_done(self.buffer.done_entries(), self._marked_position,
                           self.events.done_spans())

    # -- ingest --------------------------------------------------------------------------------
    def admit(self) -> None:
        """Raise :class:`Backpressure` if a request must be refused right now."""
        retry = self.config.retry_after
        if not self.accepting:
            raise Backpressure("the processor is starting or stopping", retry)
        if len(self._queue) + self._in_batch >= self.config.queue_size:
            raise Backpressure("the queue to the sinks is full", retry)
        if self.forwarder is not None and self.forwarder.full():
            raise Backpressure("the forward queue is full", retry)
        if self.buffer.held_bytes + self.buffer.finished_bytes >= self.memory.envelopes:
            raise Backpressure("the envelopes held fill their share of memory.max_bytes",
                               retry)

    def _room_for_spans(self, size: int, envelopes: int = 0) -> None:
        """Backpressure (RequestTooLarge if never) unless spans of ``size`` bytes fit in the
        envelopes' share of memory.max_bytes, and the ``envelopes`` they may finish in the
        queue (an empty queue takes any one request). Called under the lock the buffer
        changes under, before the WAL append: a request never takes the buffer and queue
        past them."""
        finished = self.buffer.finished_envelopes
        if finished and finished + envelopes > self.config.queue_size:
            raise Backpressure("the envelopes this request may finish would pass "
                               "pipeline.queue_size", self.config.retry_after)
        cap = self.memory.envelopes
        if size > cap:
            raise RequestTooLarge(
                f"the request's context spans need about {size} bytes of memory, more than "
                f"memory.max_bytes gives the envelopes being assembled and written ({cap}): "
                "send smaller batches")
        if self.buffer.held_bytes + self.buffer.finished_bytes + size > cap:
            raise Backpressure("the envelopes held would pass their share of "
                               "memory.max_bytes", self.config.retry_after)

    def _reserve_forward(self, size: int) -> int:
        """Room in the forward queue for a request of ``size`` bytes (given back with
        :meth:`Forwarder.release` if the request fails); 0 without ``--forward``."""
        forwarder = self.forwarder
        if forwarder is None:
            return 0
        if size > self.memory.forward:
            raise RequestTooLarge(
                f"a request of {size} bytes is more than memory.max_bytes gives the forward "
                f"queue ({self.memory.forward}): send smaller batches")
        if not forwarder.reserve(size):
            raise Backpressure("the forward queue is full", self.config.retry_after)
        return size

    def memory_held(self) -> dict[str, int]:
        """Bytes each part of memory.max_bytes holds now (estimates)."""
        forwarder = self.forwarder
        return {
            "buffer": self.buffer.held_bytes,
            "queue": self.buffer.finished_bytes,
            "events": self.events.held_bytes,
            "forward": forwarder.queued_bytes if forwarder is not None else 0,
            "decode_cache": decode_cache_bytes(),
            "remembered": self.buffer.done_bytes + len(self.events._done) * KEY_COST,
        }

    def remembered_keys(self) -> int:
        """Keys of written envelopes, and of spans with log-based events, remembered so
        that retries stay duplicates (each part of the remembered share)."""
        return len(self.buffer._done) + len(self.events._done)

    def ingest(self, body: bytes | None, transport: str, request: Any = None) -> IngestResult:
        """Take one export request (protobuf ``body``, or an already parsed ``request``).

        Raises :class:`Backpressure` or :class:`InvalidRequest`; returns once every
        accepted span is in the WAL (and on disk when fsync is on).
        """
        self.admit()
        if request is None:
            assert body is not None
            request = parse_protobuf(body)  # validates the whole request
        elif body is None:
            body = request.SerializeToString()
        return self._forwarding(self._ingest_spans, body, request, transport, logs=False)

    def _forwarding(self, take: Callable[[bytes, Any, str], IngestResult], body: bytes,
                    request: Any, transport: str, *, logs: bool) -> IngestResult:
        """``take`` the request with room reserved for it in the forward queue (refused
        before anything is done when there is none); forwarded once it is taken."""
        reserved = self._reserve_forward(len(body))
        try:
            result = take(body, request, transport)
        except BaseException:
            if self.forwarder is not None:
                self.forwarder.release(reserved)
            raise
        if self.forwarder is not None:
            self.forwarder.put(body, logs=logs, reserved=True)
        return result

    def _ingest_spans(self, body: bytes, request: Any, transport: str) -> IngestResult:
        decoded = decode_request(body, request)
        finished: list[Finished] = []
        duplicates = late = late_events = 0
        foreign: list[str] = []
        conflicts: list[str] = []
        left: list[str] = []
        if decoded.accepted:
            assert decoded.wal_payload is not None
            size = sum(accepted.size for accepted in decoded.accepted)
            envelopes = len({(a.view.trace_id, a.context_id) for a in decoded.accepted})
            with self._lock:
                self._room_for_spans(size, envelopes)
                position = self._append(SPANS, decoded.wal_payload)
                segment = position[0]
                add = self.buffer.add
                for accepted in decoded.accepted:
                    outcome = add(accepted, segment, finished)
                    if outcome is ADDED:
                        continue
                    if outcome is DUPLICATE or outcome is LATE or outcome is CONFLICT:
                        if outcome is LATE:
                            late += 1
                            # a retry is a DUPLICATE: this one is new and no bundle has it
                            if late <= 5:
                                left.append(f"span {accepted.view.span_id}: "
                                            f"{accepted.context_id} was written before it "
                                            "came: span left out")
                            _problem(decoded.problems, accepted, LATE_SPAN)
                        else:
                            duplicates += 1
                            if outcome is CONFLICT:
                                conflicts.append(f"span {accepted.view.span_id}: sent again "
                                                 "with other content: the first kept")
                                _problem(decoded.problems, accepted, DUPLICATE_SPAN)
                        view = accepted.view
                        late_events += self.events.span_done(view.trace_id, view.span_id)
                    elif outcome is FOREIGN:
                        foreign.append(f"span {accepted.view.span_id}: {accepted.context_id} "
                                       "lives in another trace: span left out")
                        _problem(decoded.problems, accepted, FOREIGN_TRACE)
                self.buffer.settle(finished)
            if not finished:
                self._sync(position)
            else:
                self._hold(finished)  # rebuilt while the disk syncs, written after it
                try:
                    self._sync(position)
                finally:
                    self._release(finished)
        self._count(decoded, transport, duplicates, late)
        if late_events:
            self.metrics.self.inc("context_processor_log_events_total", ("late",), late_events)
        if foreign:
            self.metrics.self.inc("context_processor_repairs_total", ("foreign_trace",),
                                  len(foreign))
        if conflicts:
            self.metrics.self.inc("context_processor_repairs_total", ("duplicate_span",),
                                  len(conflicts))
        message = "; ".join(filter(None, (
            decoded.error_message() if decoded.rejected or decoded.repairs else "",
            *foreign[:5], *conflicts[:5], *left)))
        if decoded.problems:
            self.problems.add(decoded.problems, message)
        return IngestResult(decoded.spans, decoded.rejected, message)

    def _append(self, kind: int, payload: bytes) -> tuple[int, int]:
        """A WAL append, or Backpressure when the disk refuses it (full, read-only, I/O
        error): nothing is acknowledged that is not durable, and the client retries."""
        try:
            return self.wal.append(kind, payload)
        except OSError as exc:
            self._storage_failed(exc)
            raise AssertionError("unreachable") from exc

    def _sync(self, position: tuple[int, int]) -> None:
        try:
            self.wal.sync(position)
        except OSError as exc:
            self._storage_failed(exc)

    def _storage_failed(self, exc: OSError) -> None:
        self.metrics.self.inc("context_processor_wal_write_errors_total")
        now = time.monotonic()
        if now >= self._storage_warned_at:  # once every 10 s while it lasts
            self._storage_warned_at = now + 10.0
            log.error("WAL: cannot write (%s); refusing exports with UNAVAILABLE/503 until it "
                      "can", exc)
        raise Backpressure(f"the write-ahead log cannot write ({exc.strerror or exc}): "
                           "retry later", self.config.retry_after) from exc

    def ingest_logs(self, body: bytes | None, transport: str, request: Any = None
                    ) -> IngestResult:
        """Take one logs export request (protobuf ``body``, or a parsed ``request``).

        Log records that are context events join their span (or wait for it); the others
        are ignored. Raises :class:`Backpressure` or :class:`InvalidRequest`; returns once
        every accepted event is in the WAL. ``IngestResult.spans`` counts log records.
        """
        self.admit()
        if request is None:
            assert body is not None
            request = parse_logs_protobuf(body)  # validates the whole request
        elif body is None:
            body = request.SerializeToString()
        return self._forwarding(self._ingest_events, body, request, transport, logs=True)

    def _room_for_events(self, size: int) -> None:
        """As :meth:`_room_for_spans`, for log-based events of ``size`` bytes: they wait in
        the event store, or join their span in the buffer, so both must have room."""
        cap = self.memory.events
        if size > cap:
            raise RequestTooLarge(
                f"the request's context events need about {size} bytes of memory, more "
                f"than memory.max_bytes gives events waiting for their span ({cap}): send "
                "smaller batches")
        if self.events.held_bytes + size > cap:
            raise Backpressure("the events waiting for their span would pass their share "
                               "of memory.max_bytes", self.config.retry_after)
        self._room_for_spans(size)

    def _ingest_events(self, body: bytes, request: Any, transport: str) -> IngestResult:
        decoded = decode_logs_request(body, request)
        finished: list[Finished] = []
        outcomes: dict[str, int] = {}
        if decoded.events:
            assert decoded.wal_payload is not None
            size = sum(event.size for event in decoded.events)
            with self._lock:
                self._room_for_events(size)
                position = self._append(EVENTS, decoded.wal_payload)
                segment = position[0]
                add = self.events.add
                for event in decoded.events:
                    outcome = add(event, segment, finished)
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
            try:
                self._sync(position)
            finally:
                self._enqueue(finished)  # after a failed sync too (see the module)
        self._count_logs(decoded, transport, outcomes)
        message = decoded.error_message() if decoded.rejected or decoded.repairs else ""
        if decoded.problems:
            self.problems.add(decoded.problems, message)
        return IngestResult(decoded.records, decoded.rejected, message)

    def _count_logs(self, decoded: DecodedLogs, transport: str,
                    outcomes: dict[str, int]) -> None:
        inc = self.metrics.self.inc
        inc("context_processor_requests_total",
            (transport, "partial" if decoded.rejected else "ok"))
        inc("context_processor_log_records_received_total", (transport,), decoded.records)
        if decoded.ignored:
            inc("context_processor_log_records_ignored_total", (), decoded.ignored)
        for outcome, count in outcomes.items():
            inc("context_processor_log_events_total", (outcome,), count)
        if decoded.rejected:
            inc("context_processor_log_events_total", ("rejected",), decoded.rejected)
        self._count_repairs(decoded)

    def _count_orphaned(self, count: int) -> None:
        self.metrics.self.inc("context_processor_log_events_total", ("orphaned",), count)

    def _count(self, decoded: Decoded, transport: str, duplicates: int, late: int) -> None:
        inc = self.metrics.self.inc
        inc("context_processor_requests_total",
            (transport, "partial" if decoded.rejected else "ok"))
        inc("context_processor_spans_received_total", (transport,), decoded.spans)
        if decoded.fast_path:
            inc("context_processor_spans_fast_path_total", (), decoded.fast_path)
        if decoded.accepted:
            inc("context_processor_spans_accepted_total", (),
                len(decoded.accepted) - duplicates - late)
        if decoded.unattributed:
            inc("context_processor_spans_unattributed_total", (), decoded.unattributed)
        if decoded.rejected:
            inc("context_processor_spans_rejected_total", (transport,), decoded.rejected)
        self._count_repairs(decoded)
        if duplicates:
            inc("context_processor_spans_duplicate_total", (), duplicates)
        if late:
            inc("context_processor_spans_late_total", (), late)

    def _count_repairs(self, decoded: Decoded) -> None:
        if decoded.repairs:
            kinds: dict[str, int] = {}
            for repair in decoded.repairs:
                kinds[repair.kind] = kinds.get(repair.kind, 0) + 1
            for kind, count in kinds.items():
                self.metrics.self.inc("context_processor_repairs_total", (kind,), count)

    # -- the queue -------------------------------------------------------------------------------
    def _enqueue(self, finished: list[Finished]) -> None:
        if not finished:
            return
        with self._cond:
            self._queue.extend(finished)
            self._cond.notify()

    def _hold(self, finished: list[Finished]) -> None:
        """Queue ``finished`` before its request's WAL sync: the emitter may rebuild them,
        not write them (``_await_sync``)."""
        with self._cond:
            self._unsynced.update(map(id, finished))
            self._queue.extend(finished)
            self._cond.notify()

    def _release(self, finished: list[Finished]) -> None:
        """The sync of the request that queued ``finished`` answered (or failed): they may
        be written."""
        with self._cond:
            self._unsynced.difference_update(map(id, finished))
            self._cond.notify_all()

    def _await_sync(self, batch: list[Finished]) -> bool:
        """Wait until the WAL sync of every envelope of ``batch`` has answered; when
        stopping with a sync that hangs, no longer (they are written: see the module).
        False when the sync stalls (past ``_STALLED`` seconds) while an envelope ready to be
        written waits in the queue: the batch goes behind it, not before it."""
        stalled = time.monotonic() + _STALLED
        with self._cond:
            while not self._unsynced.isdisjoint(map(id, batch)):
                now = time.monotonic()
                if self._give_up_at is not None and now >= self._give_up_at:
                    self._unsynced.difference_update(map(id, batch))
                    break
                if now >= stalled and self._queue and id(self._queue[0]) not in self._unsynced:
                    return False
                self._cond.wait(0.1)
        return True

    @property
    def queue_size(self) -> int:
        """Finished envelopes not yet recorded written: queued, being rebuilt, or written
        to some sinks but not all."""
        with self._flights_lock:
            flying = sum(len(flight.batch) for flight in self._flights)
        return len(self._queue) + self._in_batch + flying

    def _sweep_loop(self) -> None:
        tick = min(0.25, max(0.01, min(self.config.envelope_timeout,
                                       self.config.orphan_timeout) / 10))
        while not self._stop_sweeper.wait(tick):
            finished: list[Finished] = []
            with self._lock:
                self.buffer.expire(finished)
                self.events.expire()
            self._enqueue(finished)
            self.problems.flush()

    def _emit_loop(self) -> None:
        while True:
            if self._pending is not None and not self._queue:
                try:  # nothing to overlap with: record the store's batch now
                    if not self.finish_pending():
                        return  # stopping with a failing store: the WAL keeps it
                except Exception:  # noqa: BLE001 - the emitter must outlive any one batch
                    log.exception("emitter: unexpected error finishing a batch")
            with self._cond:
                while not self._queue and not self._emitter_stop and self._pending is None:
                    self._cond.wait(0.5)
                if not self._queue:
                    if self._pending is not None:
                        continue
                    return
                n = min(_BATCH, len(self._queue))
                if self._unsynced:
                    # a batch all synced, or all of requests still syncing: an envelope
                    # ready to be written never waits behind another request's fsync
                    queue, unsynced = self._queue, self._unsynced
                    first = id(queue[0]) in unsynced
                    n = next((i for i in range(1, n) if (id(queue[i]) in unsynced) != first), n)
                batch = [self._queue.popleft() for _ in range(n)]
                self._in_batch = len(batch)
            try:
                written = self._emit(batch)
            except Exception:  # noqa: BLE001 - the emitter must outlive any one batch
                log.exception("emitter: unexpected error; retrying the batch")
                written = None
            with self._cond:
                self._in_batch = 0
                if written is _LATER:
                    self._queue.extend(batch)  # behind what is ready (``_await_sync``)
                elif written is None:
                    if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                        return
                    self._queue.extendleft(reversed(batch))
                    self._cond.wait(1.0)
                elif not written:
                    return  # stopping with a stalled sink: the WAL keeps the rest

    def _emit(self, batch: list[Finished]) -> bool | object:
        assert self._rebuild is not None
        entries: list[tuple[tuple[str, str], dict[str, Any], bytes]] = []
        dead: list[tuple[tuple[str, str], bytes]] = []
        partial_reasons: list[str] = []
        # the store's child decodes only what its rows read: where that is in each line
        members: list[list[int] | None] | None = (
            [] if isinstance(self.store, StoreProcess) else None)
        # ... and it has the batch in parts as they are rebuilt, its work overlapping the
        # rebuild of the rest: at the end only the last part is waited for
        parts: list[Future[None]] = []
        sent = unsent_bytes = 0
        if members is not None:
            self._store_batch += 1
        rewrites = self._store_rewrites
        # some of the batch may wait for its request's WAL sync: nothing leaves before it
        held = bool(self._unsynced)
        errors = doubled = 0  # counted once the batch may leave (it may go back: _LATER)
        for finished in batch:
            try:
                bundle = self._rebuild(finished.spans, partial_reasons=finished.reasons,
                                       repairs=finished.repairs)
                if members is None:
                    line = encode_bundle(bundle)
                else:
                    line, spans = encode_indexed(bundle)
                # inside the guard too: a bundle of unexpected shape (a rebuild bug) must
                # not escape the batch, which would then be retried for ever
                key = bundle_key(bundle)
                rebuild_info = bundle.get("rebuild") or {}
                repaired = rebuild_info.get("repairs")
                twice = sum(1 for r in repaired if r.get("kind") == DUPLICATE_ID) if repaired else 0
            except Exception as exc:  # noqa: BLE001 - never lose an envelope to a bug
                log.exception("rebuild failed for trace %s context %s; spans kept in %s",
                              finished.key[0], finished.key[1], DEAD_LETTER)
                errors += 1
                dead.append((finished.key, _dead_letter(finished, exc)))
                continue
            if key != finished.key:
                log.warning("bundle key %s differs from span key %s: recovery after a crash "
                            "could write it twice", key, finished.key)
            doubled += twice
            if rebuild_info.get("status") == "partial":
                partial_reasons.extend(
                    rebuild_info.get("partial_reasons") or finished.reasons or ("incomplete",)
                )
            entries.append((finished.key, bundle, line))
            if members is not None:
                members.append(spans)
                unsent_bytes += len(line)
                if unsent_bytes >= _STORE_PART_BYTES:
                    if held:
                        if not self._await_sync(batch):
                            self._store_batch -= 1
                            return _LATER
                        held = False
                    parts.append(self._send_part(entries[sent:], members[sent:], len(parts),
                                                 last=False))
                    sent, unsent_bytes = len(entries), 0
        if held and not self._await_sync(batch):
            if members is not None:
                self._store_batch -= 1
            return _LATER
        if errors:
            self.metrics.self.inc("context_processor_rebuild_errors_total", (), errors)
        if doubled:  # found by the rebuild, not at the receiver: counted here
            self.metrics.self.inc("context_processor_repairs_total", (DUPLICATE_ID,), doubled)
        if dead:
            self._write_dead_letter(dead)
        # the store is one batch behind at most
        if not self.finish_pending():
            return False
        if entries and not self._write_retrying(self.jsonl, entries):
            return False
        others = self._sink_threads if entries else []
        flight = _Flight(batch, entries, partial_reasons, self.jsonl.position, 1 + len(others))
        with self._flights_lock:
            self._flights.append(flight)
        for sink_thread in others:
            sink_thread.put(flight)
        if entries and self._store_pool is not None:
            assert self.store is not None
            if members is not None:
                if parts and self._store_rewrites != rewrites:
                    # the previous batch was written again whole after this one's first
                    # parts went: the child rolled them back. Sent again as one part (a new
                    # number), or this batch would fail too, and the next, while any queue
                    self._store_batch += 1
                    parts, sent = [], 0
                parts.append(self._send_part(entries[sent:], members[sent:], len(parts),
                                             last=True))
            else:
                parts = [self._store_pool.submit(self.store.write, entries, members)]
            self._pending = _Pending(batch, entries, partial_reasons, parts, flight, members)
            return True
        return self._landed(flight)

    def _send_part(self, part: list[tuple[tuple[str, str], dict[str, Any], bytes]],
                   members: list[list[int] | None], number: int, *, last: bool
                   ) -> Future[None]:
        """Part ``number`` of the batch being emitted, to the store's process (on the
        store's thread: the emitter goes on rebuilding)."""
        assert isinstance(self.store, StoreProcess) and self._store_pool is not None
        return self._store_pool.submit(self.store.write_part, part, members,
                                       self._store_batch, number, last)

    def finish_pending(self) -> bool:
        """Wait for the store's batch (retrying it while it fails), then record it written;
        False when stopping with the store still failing (the WAL keeps it)."""
        pending = self._pending
        if pending is None:
            return True
        assert self.store is not None and self._store_pool is not None
        backoff = 0.05
        while True:
            try:
                # every part answered (or failed) before the batch is written again whole
                failed = [exc for exc in map(Future.exception, pending.futures)
                          if exc is not None]
                if failed:
                    raise failed[0]
                self.metrics.self.inc("context_processor_bundles_written_total",
                                      (self.store.name,), len(pending.entries))
                break
            except Exception as exc:  # noqa: BLE001 - any store failure is retried
                self.metrics.self.inc("context_processor_sink_errors_total", (self.store.name,))
                log.warning("sink %s failed (%s); retrying in %.2fs", self.store.name, exc,
                            backoff)
                if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                    log.error("sink %s still failing at shutdown: %d bundles stay in the WAL "
                              "for the next start", self.store.name, len(pending.entries))
                    return False
                with self._cond:
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, _MAX_SINK_BACKOFF)
                self._store_rewrites += 1
                pending.futures = [self._store_pool.submit(self.store.write, pending.entries,
                                                           pending.members)]
        self._pending = None
        return self._landed(pending.flight)

    def _landed(self, flight: _Flight) -> bool:
        """One more sink (or the emitter's store step) has ``flight``: record every batch
        at the head that all have, in order (a thread that finds the head still waiting
        leaves it to the one whose sink takes it last). False when stopping with the WAL
        still failing."""
        with self._flights_lock:
            flight.waiting -= 1
        with self._mark_lock:
            while True:
                with self._flights_lock:
                    if not self._flights or self._flights[0].waiting:
                        return True
                    head = self._flights[0]
                if not self._written(head.batch, head.entries, head.partial_reasons,
                                     head.position):
                    return False
                with self._flights_lock:
                    self._flights.popleft()

    def _written(self, batch: list[Finished],
                 entries: list[tuple[tuple[str, str], dict[str, Any], bytes]],
                 partial_reasons: list[str], position: tuple[int, int]) -> bool:
        """Every sink has the batch: record it in the WAL, then derive its metrics."""
        if not self._mark_written(batch, position):
            return False
        try:
            now = time.monotonic()
            measurements: list[Measurement] = []
            try:
                for _, bundle, _ in entries:
                    measurements += measure(bundle)
            finally:  # the batch's in one call: one lock, a run of budgets one lookup
                self.metrics.record(measurements)
            selfm = self.metrics.self
            selfm.observe_latencies([now - finished.last_arrival for finished in batch])
            for reason in partial_reasons:
                selfm.inc("context_processor_partial_envelopes_total", (reason,))
        except Exception:  # noqa: BLE001 - the bundles are written; metrics must not undo it
            log.exception("deriving metrics from a written batch failed")
        return True

    def _mark_written(self, batch: list[Finished], position: tuple[int, int]) -> bool:
        """Record the batch as written in the WAL, with the JSON Lines position just after
        it (retried: the bundles are out already)."""
        backoff = 0.05
        spans: list[tuple[tuple[str, str], float]] | None = None
        while True:
            wall = time.time()
            try:
                with self._lock:
                    if spans is None:  # once: the event store hands them over
                        spans = self.events.written([f.key for f in batch], wall)
                    self.wal.append(DONE, encode_done([(f.key, wall) for f in batch], position,
                                                      spans))
                    self._marked_position = position
                    for finished in batch:
                        self.buffer.mark_written(finished.key, wall)
                        for segment in finished.segments:
                            self.wal.unpin(segment)
                    self.buffer.release(batch)
                    try:
                        self.wal.compact()
                    except OSError as exc:  # retried at the next batch
                        log.warning("WAL compaction failed: %s", exc)
                return True
            except OSError as exc:
                log.error("WAL: cannot record written bundles (%s); retrying", exc)
                if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                    return False
                with self._cond:
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, _MAX_SINK_BACKOFF)

    def _catch_up(self, entries: list[tuple[tuple[str, str], dict[str, Any], bytes]]) -> None:
        """Bundles written to JSON Lines, perhaps not to the other sinks, before a crash:
        the first flight, handed to each other sink's thread (and the store's) like any
        batch, retried until taken. It is recorded written (the JSON Lines position just
        after it) only when every sink has it, and every later batch waits behind it: at
        least once to every sink, even one that is down at start-up."""
        others = self._sink_threads
        flight = _Flight([], entries, [], self.jsonl.position, 1 + len(others))
        with self._flights_lock:
            self._flights.append(flight)
        for sink_thread in others:
            sink_thread.put(flight)
        names = [t.sink.name for t in others]
        if self.store is not None and self._store_pool is not None:
            store = self.store
            names.append(store.name)

            def store_step() -> None:
                if self._write_retrying(store, entries):
                    self._landed(flight)

            self._store_pool.submit(store_step)
        else:
            self._landed(flight)
        log.info("recovery: %d bundles from JSON Lines handed to %s", len(entries),
                 ", ".join(names) or "no other sink")

    def _write_retrying(self, sink: Sink,
                        entries: list[tuple[tuple[str, str], dict[str, Any], bytes]],
                        cond: threading.Condition | None = None) -> bool:
        """``sink.write(entries)``, retried with backoff (waiting on ``cond``, the emitter's
        by default) while it fails; False when stopping with it still failing (the WAL
        keeps the batch)."""
        cond = self._cond if cond is None else cond
        backoff = 0.05
        while True:
            try:
                sink.write(entries)
                self.metrics.self.inc("context_processor_bundles_written_total",
                                      (sink.name,), len(entries))
                return True
            except Exception as exc:  # noqa: BLE001 - any sink failure is retried
                self.metrics.self.inc("context_processor_sink_errors_total", (sink.name,))
                log.warning("sink %s failed (%s); retrying in %.2fs", sink.name, exc,
                            backoff)
                if self._give_up_at is not None and time.monotonic() >= self._give_up_at:
                    log.error("sink %s still failing at shutdown: %d bundles stay in the "
                              "WAL for the next start", sink.name, len(entries))
                    return False
                with cond:
                    cond.wait(backoff)
                backoff = min(backoff * 2, _MAX_SINK_BACKOFF)

    def _write_dead_letter(self, dead: list[tuple[tuple[str, str], bytes]]) -> None:
        """Append the lines to ``dead-letter.jsonl``, once: when that fails too (a full
        disk), the envelopes are logged by key and counted
        (``context_processor_sink_errors_total{sink="dead_letter"}``), not retried: an
        envelope that cannot be written must not hold up the ones behind it."""
        path = Path(self.config.out_dir) / DEAD_LETTER
        try:
            with open(path, "ab") as handle:
                end = handle.tell()
                try:
                    handle.write(b"".join(line for _, line in dead))
                    handle.flush()
                except BaseException:
                    # a write cut short (a full disk) leaves half a line, which the next
                    # dead letter would be glued onto: cut the file back to where it was
                    with contextlib.suppress(OSError):
                        handle.truncate(end)
                    raise
        except Exception as exc:  # noqa: BLE001 - given up on, loudly, never retried
            self.metrics.self.inc("context_processor_sink_errors_total", ("dead_letter",))
            log.error("cannot write %s (%s): lost the spans of %s", path, exc,
                      ", ".join(f"trace {trace} context {context}"
                                for (trace, context), _ in dead))
            return
        self.metrics.self.inc("context_processor_bundles_written_total", ("dead_letter",),
                              len(dead))

    # -- stop ----------------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Flush everything pending as ``partial`` (reason ``shutdown``) and stop.

        Receivers must be stopped first. If a sink is still failing after ``timeout``
        seconds, the unwritten envelopes stay in the WAL and are replayed at the next start.
        """
        self.accepting = False
        self._stop_sweeper.set()
        self.problems.flush(force=True)
        with self._lock:
            drained = self.buffer.drain(REASON_SHUTDOWN)
        self._enqueue(drained)
        with self._cond:
            self._emitter_stop = True
            self._give_up_at = time.monotonic() + timeout
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout + 5)
        for sink_thread in self._sink_threads:  # each drains its queue, or gives up
            sink_thread.stop()
        for sink_thread in self._sink_threads:
            if sink_thread.thread.is_alive():
                sink_thread.thread.join(timeout + 5)
        if self.forwarder is not None:
            self.forwarder.close()
        with self._lock:
            self.wal.compact(idle_rotate_bytes=0)
        self.wal.close()
        if self._store_pool is not None:
            self._store_pool.shutdown(wait=True)
        for sink in [*self.sinks, *([self.store] if self.store is not None else [])]:
            try:
                sink.close()
            except Exception:  # noqa: BLE001
                log.warning("closing sink %s failed", sink.name, exc_info=True)

    # -- gauges ----------------------------------------------------------------------------------
    def _register_gauges(self) -> None:
        gauge = self.metrics.self.gauge
        gauge("context_processor_info",
              lambda: [((__version__, api_implementation.Type()), 1.0)])
        gauge("context_processor_ready", lambda: 1.0 if self.accepting else 0.0)
        gauge("context_processor_traces_in_flight", lambda: self.buffer.traces_in_flight)
        gauge("context_processor_envelopes_in_flight", lambda: self.buffer.envelopes_in_flight)
        gauge("context_processor_spans_in_flight", lambda: self.buffer.spans_in_flight)
        gauge("context_processor_log_events_waiting", lambda: self.events.held_events)
        gauge("context_processor_queue_size", lambda: self.queue_size)
        gauge("context_processor_queue_capacity", lambda: self.config.queue_size)
        gauge("context_processor_wal_bytes", lambda: self.wal.size_bytes)
        gauge("context_processor_wal_segments", lambda: self.wal.segment_count)
        forwarder = self.forwarder
        gauge("context_processor_forward_queue_size",
              lambda: forwarder.size if forwarder is not None else 0)
        gauge("context_processor_forward_errors_total",
              lambda: [((), float(forwarder.errors if forwarder is not None else 0))])
        gauge("context_processor_forward_dropped_total",
              lambda: [((reason,), float(count)) for reason, count in
                       sorted(forwarder.dropped_by.copy().items())]
              if forwarder is not None else [])
        sink = self.store
        gauge("context_processor_store_left_out_total",
              lambda: [((reason,), float(count)) for reason, count in
                       sorted(sink.left_out.copy().items())]
              if sink is not None else [])
        gauge("context_processor_forward_split_total",
              lambda: [((), float(forwarder.splits if forwarder is not None else 0))])
        gauge("context_processor_memory_bytes",
              lambda: [((part,), float(held)) for part, held in self.memory_held().items()])
        limits = self.memory.by_part()
        gauge("context_processor_memory_limit_bytes",
              lambda: [((part,), float(limits[part])) for part in PARTS])
