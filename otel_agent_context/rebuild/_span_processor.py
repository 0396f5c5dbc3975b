"""An SDK ``SpanProcessor`` that rebuilds bundles in-process, as envelopes complete.

It runs the processor service's completion engine (:mod:`._completion`) and its rebuild
(:func:`~._rebuild.rebuild_envelope`), off the application's threads: ``on_end`` only
checks that a span carries ``context.id`` and puts it on a bounded queue, as the SDK's
``BatchSpanProcessor`` does; a daemon worker converts, completes, rebuilds and writes.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .. import _semconv as S
from .._table import EVENTS
from ._boundary import normalize_view
from ._completion import (
    DEFAULT_DEDUPE_MAX,
    DEFAULT_DEDUPE_WINDOW,
    DEFAULT_ENVELOPE_TIMEOUT,
    DEFAULT_MAX_SPANS,
    DEFAULT_MAX_TRACES,
    DEFAULT_ORPHAN_TIMEOUT,
    REASON_SHUTDOWN,
    Accepted,
    Finished,
    TraceBuffer,
)
from ._encode import encode_bundle
from ._events import EventStore, log_event_from_record
from ._rebuild import rebuild_envelope
from ._view import view_from_readable_span

__all__ = ["DEFAULT_MAX_QUEUE_SIZE", "BundleSpanProcessor"]

_log = logging.getLogger("otel_agent_context")

BundleCallback = Callable[[dict[str, Any]], None]

#: Ended spans waiting for the worker (the SDK BatchSpanProcessor's default queue size).
DEFAULT_MAX_QUEUE_SIZE = 2048
#: Spans the worker takes per round before it emits and answers flushes.
_ROUND = 512
#: At most one warning about dropped spans per this many seconds.
_DROP_WARNING_INTERVAL = 5.0
_CONTEXT_ID = S.CONTEXT_ID
_EVENT_NAMES = frozenset(EVENTS)
#: Log-based events held for spans that have not ended yet (count; bytes at 1 KiB each).
_MAX_HELD_EVENTS = 100_000


def _context_id(span: ReadableSpan) -> object:
    """The span's ``context.id`` (None when it has none), for every span the application ends.

    ``span.attributes`` is a read-only view of the SDK's ``BoundedAttributes``, a
    ``MutableMapping`` whose ``get`` finds a missing key by raising and catching ``KeyError``:
    about 1.5 µs for each span without ``context.id``, most of them. The plain dict inside
    answers in tens of nanoseconds; anything else is read through the public property.
    """
    attributes = getattr(span, "_attributes", None)
    raw = getattr(attributes, "_dict", attributes)
    if type(raw) is dict:
        return raw.get(_CONTEXT_ID)
    public = span.attributes
    return public.get(_CONTEXT_ID) if public else None


class _Marker:
    """Put on the queue by force_flush and shutdown: done once the worker reaches it."""

    __slots__ = ("done", "stop")

    def __init__(self, stop: bool = False) -> None:
        self.stop = stop
        self.done = threading.Event()


class _Log:
    """A log record on the worker's queue (a context event, or not: the worker decides)."""

    __slots__ = ("record",)

    def __init__(self, record: Any) -> None:
        self.record = record


class _LogEvents(LogRecordProcessor):
    """The SDK ``LogRecordProcessor`` side of a :class:`BundleSpanProcessor`."""

    def __init__(self, owner: BundleSpanProcessor) -> None:
        self._owner = weakref.ref(owner)

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        owner = self._owner()
        if owner is not None:
            owner._on_log(log_record.log_record)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        owner = self._owner()
        return owner.force_flush(timeout_millis) if owner is not None else True

    def shutdown(self) -> None:
        return None  # the span processor's shutdown drains both


class BundleSpanProcessor(SpanProcessor):
    """Rebuild each envelope when its spans have ended and hand the bundle on.

    The completion rules are the processor service's (one engine): an envelope is complete
    as soon as its envelope span (``context.scope``) and the ``context.span_count`` other
    spans it promised have ended; it is emitted ``partial`` when no span of it has ended for
    ``envelope_timeout`` seconds (``orphan_timeout`` while its envelope span has not ended),
    when the caps evict it (``evicted``), or at shutdown (``shutdown``). A span id seen twice
    counts once; an envelope lives in one trace, and a span of another trace with its
    ``context.id`` is left out and listed as a repair in the bundle.

    ``on_end`` never converts, rebuilds or writes on the application's thread: it puts the
    span on a bounded queue and a daemon worker thread does the rest; ``on_bundle`` is called
    on that thread. Errors there are logged (logger ``otel_agent_context``), never raised.
    A process forked from the application (a pre-forking server's workers) gets its own
    worker and starts empty; the parent emits what it had pending.

    Context events sent as log records (``AgentContext(events_as="logs")``) reach it through
    :attr:`log_record_processor`, added to the SDK ``LoggerProvider`` the API logs with; they
    join their spans as in the processor service (before or after them, duplicates once), and
    an envelope promising ``context.event_count`` such events waits for them.

    Args:
        on_bundle: called with each bundle dict (on the worker thread).
        path: a JSON Lines file each bundle is appended to (before ``on_bundle`` is called).
        envelope_timeout: seconds to wait, after an envelope's last span, for the spans its
            envelope span promised (default ``DEFAULT_ENVELOPE_TIMEOUT``, 30).
        orphan_timeout: seconds to wait, after an envelope's last span, while its envelope
            span has not ended at all: a long turn ends its envelope span last (default
            ``DEFAULT_ORPHAN_TIMEOUT``, 120).
        max_spans: spans pending at most; beyond, the least recently active envelope is
            emitted ``partial`` (``evicted``) (default ``DEFAULT_MAX_SPANS``, 200 000).
        max_traces: traces pending at most, likewise (default ``DEFAULT_MAX_TRACES``, 20 000).
        max_queue_size: ended spans waiting for the worker; when it is full a span is
            dropped and counted (:attr:`dropped_spans`) and a warning is logged at most
            every few seconds (default ``DEFAULT_MAX_QUEUE_SIZE``, 2048).

    Envelopes already emitted are remembered for ``DEFAULT_DEDUPE_WINDOW`` seconds (at most
    ``DEFAULT_DEDUPE_MAX``), so a span ending after its envelope was emitted does not make a
    second bundle.
    """

    def __init__(
        self,
        on_bundle: BundleCallback | None = None,
        *,
        path: str | Path | None = None,
        envelope_timeout: float = DEFAULT_ENVELOPE_TIMEOUT,
        orphan_timeout: float = DEFAULT_ORPHAN_TIMEOUT,
        max_spans: int = DEFAULT_MAX_SPANS,
        max_traces: int = DEFAULT_MAX_TRACES,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
    ) -> None:
        if on_bundle is None and path is None:
            raise ValueError("BundleSpanProcessor needs on_bundle or path")
        for name, value in (("envelope_timeout", envelope_timeout),
                            ("orphan_timeout", orphan_timeout), ("max_spans", max_spans),
                            ("max_traces", max_traces), ("max_queue_size", max_queue_size)):
            if value <= 0:
                raise ValueError(f"BundleSpanProcessor: {name} must be positive, not {value!r}")
        self._on_bundle = on_bundle
        self._path = Path(path) if path is not None else None
        self._new_buffer = functools.partial(
            TraceBuffer, envelope_timeout=envelope_timeout, orphan_timeout=orphan_timeout,
            max_traces=max_traces, max_spans=max_spans,
            dedupe_window=DEFAULT_DEDUPE_WINDOW, dedupe_max=DEFAULT_DEDUPE_MAX)
        self._max_queue_size = max_queue_size
        self._orphan_timeout = orphan_timeout
        self._stopped = False
        self._log_processor = _LogEvents(self)
        self._start()
        if hasattr(os, "register_at_fork"):
            restart = weakref.WeakMethod(self._after_fork_in_child)

            def after_fork_in_child() -> None:
                method = restart()
                if method is not None:
                    method()

            os.register_at_fork(after_in_child=after_fork_in_child)

    def _start(self) -> None:
        """An empty engine and queue, and a worker thread for them."""
        self._log_seq = itertools.count()
        self._events = EventStore(
            orphan_timeout=self._orphan_timeout, max_events=_MAX_HELD_EVENTS,
            max_bytes=_MAX_HELD_EVENTS * 1024, remember_for=DEFAULT_DEDUPE_WINDOW,
            remember_max=DEFAULT_MAX_SPANS)
        self._buffer = self._new_buffer(on_span=self._events.on_span,
                                        on_finish=self._events.on_finish)
        self._events.buffer = self._buffer
        self._queue: collections.deque[ReadableSpan | _Log | _Marker] = collections.deque()
        self._wake = threading.Event()
        self._state_lock = threading.Lock()
        self._dropped = 0
        self._next_drop_warning = 0.0
        self._worker = threading.Thread(target=self._run, name="BundleSpanProcessor",
                                        daemon=True)
        self._worker.start()

    def _after_fork_in_child(self) -> None:
        # The parent's worker is not in the child, and what the parent had queued or pending
        # is the parent's to emit: the child starts empty, as the SDK's BatchSpanProcessor.
        if not self._stopped:
            self._start()

    @property
    def dropped_spans(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    @property
    def log_record_processor(self) -> LogRecordProcessor:
        """Add this to the SDK ``LoggerProvider`` when context events go as log records
        (``logger_provider.add_log_record_processor(bsp.log_record_processor)``)."""
        return self._log_processor

    # -- the application's side ------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def _on_log(self, record: Any) -> None:
        # Only what may be a context event is queued: the application's other logs pass by.
        if self._stopped or record.event_name not in _EVENT_NAMES:
            return
        queue = self._queue
        if len(queue) >= self._max_queue_size:
            self._drop()
            return
        queue.append(_Log(record))
        if not self._wake.is_set():
            self._wake.set()

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or not isinstance(_context_id(span), str):
            return
        queue = self._queue
        if len(queue) >= self._max_queue_size:
            self._drop()
            return
        queue.append(span)
        if not self._wake.is_set():
            self._wake.set()

    def _drop(self) -> None:
        with self._state_lock:
            self._dropped += 1
            now = time.monotonic()
            if now < self._next_drop_warning:
                return
            self._next_drop_warning = now + _DROP_WARNING_INTERVAL
            dropped = self._dropped
        _log.warning("BundleSpanProcessor: queue full (%d spans), %d spans dropped so far",
                     self._max_queue_size, dropped)

    def _request(self, marker: _Marker) -> _Marker:
        self._queue.append(marker)
        self._wake.set()
        return marker

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every span ended before the call is processed and the envelopes it
        completes, and those whose wait is over, are emitted; False if ``timeout_millis``
        passed first. Envelopes still waiting keep waiting.

        Called on the worker thread (``on_bundle`` flushing the tracer provider, say), it
        returns False at once: the worker cannot wait for itself."""
        if threading.current_thread() is self._worker:
            return False
        if self._stopped:  # shut down, or shutting down: its drain is the last flush
            self._worker.join(timeout_millis / 1000)
            return not self._worker.is_alive()
        return self._request(_Marker()).done.wait(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Process the queue, emit everything still pending ``partial`` (``shutdown``) and
        stop the worker. Later calls do nothing; later spans are ignored."""
        with self._state_lock:
            if self._stopped:
                return
            self._stopped = True
        self._request(_Marker(stop=True))
        if threading.current_thread() is not self._worker:
            self._worker.join()

    # -- the worker --------------------------------------------------------------------------
    def _run(self) -> None:
        queue, buffer = self._queue, self._buffer
        while True:
            if not queue:
                deadline = buffer.next_deadline()
                self._wake.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            self._wake.clear()
            finished: list[Finished] = []
            markers: list[_Marker] = []
            stop = False
            try:
                for _ in range(min(len(queue), _ROUND)):
                    item = queue.popleft()
                    if isinstance(item, _Marker):
                        markers.append(item)
                        stop = stop or item.stop
                    else:
                        self._add(item, finished)
                buffer.settle(finished)
                buffer.expire(finished)
                self._events.expire()
                if stop:
                    while queue:  # spans that raced shutdown
                        item = queue.popleft()
                        if isinstance(item, _Marker):
                            markers.append(item)
                        else:
                            self._add(item, finished)
                    finished.extend(buffer.drain(REASON_SHUTDOWN))
                self._emit(finished)
            except Exception:  # noqa: BLE001 - the worker must outlive any one round
                _log.exception("BundleSpanProcessor: unexpected error in the worker")
            for marker in markers:
                marker.done.set()
            if stop:
                return

    def _add(self, span: ReadableSpan | _Log, finished: list[Finished]) -> None:
        if isinstance(span, _Log):
            try:
                event = log_event_from_record(span.record)
                if event is not None:
                    # The SDK hands each record over once: in process no record is a retry,
                    # so two alike (same name, time and values) are two events.
                    event.digest = next(self._log_seq)
                    self._events.add(event, None, finished)
            except Exception:  # noqa: BLE001 - one bad record must not stop the others
                _log.exception("BundleSpanProcessor: a log record cannot be taken")
            return
        try:
            accepted = Accepted.of(normalize_view(view_from_readable_span(span)))
            if accepted is not None:
                self._buffer.add(accepted, None, finished)
        except Exception:  # noqa: BLE001 - one bad span must not stop the others
            _log.exception("BundleSpanProcessor: span %r cannot be taken", span.name)

    def _emit(self, finished: list[Finished]) -> None:
        if finished:  # their log-based events' spans are remembered as written from now
            self._events.written([envelope.key for envelope in finished], time.time())
        bundles = []
        for envelope in finished:
            try:
                bundles.append(rebuild_envelope(envelope.spans, partial_reasons=envelope.reasons,
                                                repairs=envelope.repairs))
            except Exception:  # noqa: BLE001 - the other envelopes still go out
                _log.exception("BundleSpanProcessor: rebuild failed for trace %s context %s",
                               *envelope.key)
        if not bundles:
            return
        if self._path is not None:
            try:
                lines = b"".join(encode_bundle(b) for b in bundles)
                with self._path.open("ab") as fh:
                    fh.write(lines)
            except Exception:  # noqa: BLE001
                _log.exception("BundleSpanProcessor: cannot append bundles to %s", self._path)
        if self._on_bundle is not None:
            for bundle in bundles:
                try:
                    self._on_bundle(bundle)
                except Exception:  # noqa: BLE001 - a callback's bug must not stop the worker
                    _log.exception("BundleSpanProcessor: on_bundle raised")
