"""Log-based context events until they are on their span, and after.

A context event sent as a log record (``_decode_logs``) names its span by trace id and span
id, and travels apart from it: it may come before the span, while the span waits in the
buffer, or after its envelope was written.

* **span buffered**: the event is put on that span (among its events, in time order) and
  counted for its envelope (:meth:`TraceBuffer.attach`), which may complete it;
* **span not here yet**: the event is held, keyed by (trace id, span id), until the span
  arrives (the buffer's ``on_span`` hook hands it over) or ``orphan_timeout`` passes
  without a new event for that span; held events are bounded in count and in bytes, the
  oldest dropped first (counted ``orphaned``);
* **envelope written**: the event is counted ``late`` (a retry of one it had: ``duplicate``)
  and dropped. The spans of written envelopes that had log-based events (or promised some
  with ``context.event_count``) are remembered for ``remember_for`` seconds for that; an
  event for a span of an envelope written without any is held, then dropped as orphaned.

Duplicates (client retries) are recognised by a digest of (event name, time, attributes)
per (trace id, span id). An event's WAL segment stays pinned while it is held, then by its
envelope until the bundle is written. An event record can outlive its span's record in the
WAL (compaction deletes the older segment), so the spans of written envelopes with
log-based events go into the WAL's DONE records and checkpoints (:meth:`written`,
:meth:`done_spans`): at replay, events for them are known duplicates, not held.

The processor's pipeline calls this under its lock, like the buffer; the in-process
``BundleSpanProcessor`` from its worker thread (records of the SDK's ``LoggerProvider``,
through :func:`log_event_from_record`).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .. import _semconv as S
from .._table import EVENTS
from ._boundary import Repair, check_event, dropped_event, normalize_attributes, undated_event
from ._completion import DUPLICATE, LATE, Finished, Key, TraceBuffer
from ._view import EventView, SpanView

__all__ = ["ACCEPTED", "DUPLICATE", "EVENT_OVERHEAD", "LATE", "EventStore", "LogEvent",
           "log_event_from_record"]

ACCEPTED = "accepted"
#: Fixed cost of a held event beyond its encoding (objects, dict slots): for the byte cap.
EVENT_OVERHEAD = 256

SpanKey = tuple[str, str]  # (trace id, span id)

#: The mask of a span known only to be written (replayed): every event is a duplicate.
_ALL = (1 << 128) - 1


def _bit(digest: int) -> int:
    return 1 << (digest & 127)


def _time(event: EventView) -> int:
    return event.time_unix_nano


@dataclasses.dataclass(slots=True)
class LogEvent:
    """A context event from a log record, checked, not yet on its span."""

    trace_id: str
    span_id: str
    name: str
    #: None when the boundary dropped it (it lacks an attribute it must carry): it still
    #: counts as arrived, and its repair goes to its span.
    event: EventView | None
    repairs: list[Repair]
    #: (event name, time, attributes) digested: a retried record is a duplicate
    digest: int
    #: its encoded size plus a fixed overhead: what holding it costs, for the byte cap
    size: int
    #: no time and no observed time: dated at its span's start when it joins it
    undated: bool = False


def log_event_from_record(record: Any) -> LogEvent | None:
    """An SDK log record (``opentelemetry._logs.LogRecord``) as a context event, through the
    boundary; None when it is not one (another event name, or no span to join)."""
    name = record.event_name
    if name not in EVENTS or not record.trace_id or not record.span_id:
        return None
    span_id = format(record.span_id, "016x")
    repairs: list[Repair] = []
    attributes = dict(record.attributes) if record.attributes else {}
    checked = normalize_attributes(attributes, repairs, span_id=span_id, event=name)
    time = record.timestamp or record.observed_timestamp or 0
    digest = hashlib.blake2b(orjson.dumps([name, time, attributes], default=repr,
                                          option=orjson.OPT_SORT_KEYS), digest_size=8)
    lacking = check_event(name, checked)
    event: EventView | None = None
    if lacking is not None:
        repairs.append(dropped_event(name, lacking, span_id))
    else:
        event = EventView(name, time, dict(checked))
        if not time:
            repairs.append(undated_event(name, span_id))
    return LogEvent(format(record.trace_id, "032x"), span_id, name, event, repairs,
                    int.from_bytes(digest.digest(), "little"), EVENT_OVERHEAD,
                    event is not None and not time)


class _Held:
    """Events for one span that has not arrived."""

    __slots__ = ("digests", "events", "last", "segments", "size")

    def __init__(self, now: float) -> None:
        self.events: list[LogEvent] = []
        self.digests: set[int] = set()
        self.segments: list[int] = []
        self.size = 0
        self.last = now


def _put(view: SpanView, event: LogEvent) -> None:
    """Put a log-based event on its span: its repairs, and the event in time order."""
    if event.repairs:
        view.repairs.extend(event.repairs)
    ev = event.event
    if ev is None:  # dropped by the boundary: only its repair is left
        return
    if event.undated:
        ev.time_unix_nano = view.start_time_unix_nano
    events = view.events
    if not isinstance(events, list):
        events = view.events = list(events)
    bisect.insort(events, ev, key=_time)


class EventStore:
    """Held, joined and remembered log-based events (see the module's docstring)."""

    def __init__(
        self,
        *,
        orphan_timeout: float,
        max_events: int,
        max_bytes: int,
        remember_for: float,
        remember_max: int,
        clock: Callable[[], float] = time.monotonic,
        pin: Callable[[int], None] = lambda segment: None,
        unpin: Callable[[int], None] = lambda segment: None,
        on_orphaned: Callable[[int], None] = lambda count: None,
    ) -> None:
        self.orphan_timeout = orphan_timeout
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.remember_for = remember_for
        self.remember_max = remember_max
        self.clock = clock
        self.pin = pin
        self.unpin = unpin
        self.on_orphaned = on_orphaned
        self.buffer: TraceBuffer | None = None  # set by the pipeline (they refer to each other)
        #: trace id -> keys of its envelopes in the buffer (an envelope lives in one trace)
        self._envelopes: dict[str, list[Key]] = {}
        #: digests of the events joined to buffered spans
        self._digests: dict[SpanKey, set[int]] = {}
        #: events whose span has not come, oldest activity first
        self._held: OrderedDict[SpanKey, _Held] = OrderedDict()
        #: spans of finished envelopes: [expiry (monotonic), mask of their events' digests,
        #: wall time the bundle was written or None]
        self._done: OrderedDict[SpanKey, list[Any]] = OrderedDict()
        #: finished envelopes with log-based events, not yet written: their spans
        self._unwritten: dict[Key, list[SpanKey]] = {}
        self.held_events = 0
        self.held_bytes = 0

    # -- an event arrives ------------------------------------------------------------------------
    def add(self, event: LogEvent, segment: int | None, out: list[Finished]) -> str:
        """Join, hold or refuse one event: ``"accepted"``, ``"duplicate"`` or ``"late"``.
        Envelopes it completes (or evicts) are appended to ``out``."""
        span_key = (event.trace_id, event.span_id)
        done = self._done.get(span_key)
        if done is not None:
            return DUPLICATE if done[1] & _bit(event.digest) else LATE
        found = self._find(span_key)
        if found is not None:
            key, view = found
            digests = self._digests.setdefault(span_key, set())
            if event.digest in digests:
                return DUPLICATE
            digests.add(event.digest)
            _put(view, event)
            assert self.buffer is not None
            self.buffer.attach(key, 1, () if segment is None else (segment,), out, event.size)
            return ACCEPTED
        now = self.clock()
        held = self._held.get(span_key)
        if held is None:
            held = self._held[span_key] = _Held(now)
        else:
            if event.digest in held.digests:
                return DUPLICATE
            self._held.move_to_end(span_key)
            held.last = now
        held.digests.add(event.digest)
        held.events.append(event)
        held.size += event.size
        if segment is not None and segment not in held.segments:
            held.segments.append(segment)
            self.pin(segment)
        self.held_events += 1
        self.held_bytes += event.size
        dropped = 0
        while self._held and (self.held_events > self.max_events
                              or self.held_bytes > self.max_bytes):
            dropped += self._drop(next(iter(self._held)))
        if dropped:
            self.on_orphaned(dropped)
        return ACCEPTED

    def _find(self, span_key: SpanKey) -> tuple[Key, SpanView] | None:
        keys = self._envelopes.get(span_key[0])
        if keys and self.buffer is not None:
            for key in keys:
                view = self.buffer.pending_span(key, span_key[1])
                if view is not None:
                    return key, view
        return None

    def _drop(self, span_key: SpanKey) -> int:
        held = self._held.pop(span_key)
        for segment in held.segments:
            self.unpin(segment)
        self.held_events -= len(held.events)
        self.held_bytes -= held.size
        return len(held.events)

    # -- the buffer's hooks ----------------------------------------------------------------------
    def on_span(self, key: Key, view: SpanView) -> tuple[int, Iterable[int], int]:
        """A span entered the buffer: its held events go on it. (count, their segments,
        their bytes)."""
        keys = self._envelopes.get(view.trace_id)
        if keys is None:  # no list made for the spans of a trace already known
            self._envelopes[view.trace_id] = [key]
        elif key not in keys:
            keys.append(key)
        if not self._held:
            return 0, (), 0
        span_key = (view.trace_id, view.span_id)
        held = self._held.pop(span_key, None)
        if held is None:
            return 0, (), 0
        for event in held.events:
            _put(view, event)
        self._digests[span_key] = held.digests
        self.held_events -= len(held.events)
        self.held_bytes -= held.size
        # The buffer pins the segments for the envelope as it takes them; nothing compacts
        # in between (both run under the pipeline's lock).
        for segment in held.segments:
            self.unpin(segment)
        return len(held.events), held.segments, held.size

    def on_finish(self, finished: Finished) -> None:
        """An envelope is done: its spans are remembered if log-based events concern it."""
        trace_id = finished.key[0]
        keys = self._envelopes.get(trace_id)
        if keys is not None:
            if finished.key in keys:
                keys.remove(finished.key)
            if not keys:
                del self._envelopes[trace_id]
        digests = self._digests
        concerned = any(S.CONTEXT_EVENT_COUNT in view.attributes for view in finished.spans)
        if digests:
            masks = []
            for view in finished.spans:
                joined = digests.pop((view.trace_id, view.span_id), None)
                mask = 0
                if joined:
                    concerned = True
                    for digest in joined:
                        mask |= _bit(digest)
                masks.append(mask)
        else:  # no event joined any span: no mask to make, span by span
            masks = [0] * len(finished.spans)
        if concerned:
            expiry = self.clock() + self.remember_for
            span_keys = [(view.trace_id, view.span_id) for view in finished.spans]
            for span_key, mask in zip(span_keys, masks, strict=True):
                self._remember(span_key, expiry, mask)
            self._unwritten[finished.key] = span_keys

    def _remember(self, span_key: SpanKey, expiry: float, mask: int,
                  wall: float | None = None) -> None:
        self._done[span_key] = [expiry, mask, wall]
        self._done.move_to_end(span_key)
        while len(self._done) > self.remember_max:
            self._done.popitem(last=False)

    # -- what the WAL keeps of it --------------------------------------------------------------
    def written(self, keys: Iterable[Key], wall: float) -> list[tuple[SpanKey, float]]:
        """These envelopes' bundles are written: the spans (with log-based events) the
        DONE record lists."""
        out = []
        for key in keys:
            for span_key in self._unwritten.pop(key, ()):
                entry = self._done.get(span_key)
                if entry is not None:
                    entry[2] = wall
                out.append((span_key, wall))
        return out

    def done_spans(self) -> list[tuple[SpanKey, float]]:
        """Remembered spans of written envelopes (a WAL checkpoint): never one whose bundle
        the sinks have not taken."""
        return [(span_key, entry[2]) for span_key, entry in self._done.items()
                if entry[2] is not None]

    # -- spans that will not join ----------------------------------------------------------------
    def span_done(self, trace_id: str, span_id: str) -> int:
        """A span of an envelope already written arrived (late, or replayed): events held
        for it are dropped and the span is remembered; how many were held."""
        span_key = (trace_id, span_id)
        held = self._held.get(span_key)
        if held is None:
            return 0
        mask = 0
        for digest in held.digests:
            mask |= _bit(digest)
        count = self._drop(span_key)
        self._remember(span_key, self.clock() + self.remember_for, mask)
        return count

    def forget_written(self, trace_id: str, span_id: str, wall: float | None = None) -> None:
        """At replay: a span whose envelope was written (at ``wall``, else now) before the
        restart. Events for it (held, or to come) are duplicates."""
        span_key = (trace_id, span_id)
        if span_key in self._held:
            self._drop(span_key)
        now = time.time()
        wall = now if wall is None else wall
        self._remember(span_key, self.clock() + self.remember_for - (now - wall), _ALL, wall)

    # -- time ------------------------------------------------------------------------------------
    def expire(self) -> int:
        """Drop events held past ``orphan_timeout`` and forget old written spans; how many
        events were dropped."""
        now = self.clock()
        dropped = 0
        held = self._held
        while held:
            span_key = next(iter(held))
            if held[span_key].last + self.orphan_timeout > now:
                break
            dropped += self._drop(span_key)
        done = self._done
        while done and next(iter(done.values()))[0] <= now:
            done.popitem(last=False)
        if dropped:
            self.on_orphaned(dropped)
        return dropped
