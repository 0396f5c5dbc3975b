"""The completion engine: spans grouped by (trace id, ``context.id``) until their envelope is done.

One engine for both feeds: the processor service (``processor._pipeline``, spans decoded
from OTLP) and the in-process ``BundleSpanProcessor`` (SDK spans). It has no dependency on
the processor service: its input is :class:`Accepted`, a span view and the facts it needs.

Completion (contract section 1): an envelope is finished as soon as its envelope span (the
one carrying ``context.scope``) and ``context.span_count`` other spans are in; one whose
envelope span has no usable count (off-spec: nothing says when it is done) at the end of
the batch that brought it (:meth:`TraceBuffer.settle`: one request, one worker round), so
its spans sent after the envelope span in that batch join it. Otherwise it
is finished ``partial`` once no span of it has come for ``envelope_timeout`` seconds (or
``orphan_timeout`` while its envelope span has not come at all: a long agent turn ends its
envelope span last, after its stage spans have long been exported).

Bounded memory: at ``max_traces`` traces or ``max_spans`` spans in flight, or
``max_bytes`` bytes (the sizes :class:`Accepted` and the event store give), the least
recently active envelope is finished ``partial`` (reason ``evicted``): never dropped.

One trace per envelope (contract section 1): the first trace an envelope's ``context.id``
is seen in owns it while the envelope is pending or remembered; a span of another trace
with the same ``context.id`` is left out and listed as a repair of the owner's bundle while
that is not written (pending, or finished by the same :meth:`TraceBuffer.add` batch), else
only returned as foreign for the caller to tell the sender; never made a second envelope.

Idempotency: a finished envelope's key is remembered for ``dedupe_window`` seconds; a span
arriving for it is a duplicate (a client retry, same span id) or late (a new span id) and
is counted, not turned into a second bundle. To keep that memory small, an envelope's span
ids are kept as a 128-bit mask, so a late span is now and then counted as a duplicate
(about 6% of the time for an envelope of 8 spans); either way it is dropped.

Log-based context events (``_events`` holds them until their span is here):
``on_span`` hands a span's waiting events over as it is added, :meth:`TraceBuffer.attach`
adds later ones, ``on_finish`` tells the event store an envelope is done. An envelope whose
span carries ``context.event_count`` is complete only once that many events joined too
(else partial, reason ``missing_events``); events count against ``max_events``.

The buffer is not thread-safe: its user holds a lock around every call (the pipeline) or
calls it from one thread (the span processor's worker).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from .. import _semconv as S
from ._boundary import Repair, duplicate_span, foreign_trace, same_span
from ._view import SpanView

__all__ = [
    "DEFAULT_DEDUPE_MAX",
    "DEFAULT_DEDUPE_WINDOW",
    "DEFAULT_ENVELOPE_TIMEOUT",
    "DEFAULT_MAX_SPANS",
    "DEFAULT_MAX_TRACES",
    "DEFAULT_ORPHAN_TIMEOUT",
    "DUPLICATE",
    "FOREIGN",
    "LATE",
    "REASON_EVICTED",
    "REASON_MISSING_EVENTS",
    "REASON_NO_ENVELOPE_SPAN",
    "REASON_SHUTDOWN",
    "REASON_TIMEOUT",
    "Accepted",
    "Finished",
    "TraceBuffer",
]

Key = tuple[str, str]  # (trace id, context id)

#: Seconds to wait, after the last span of an envelope, for the spans it promised.
DEFAULT_ENVELOPE_TIMEOUT = 30.0
#: Seconds to wait, after the last span, for an envelope span that has not come at all.
DEFAULT_ORPHAN_TIMEOUT = 120.0
#: Traces, and spans, in flight before the least recently active envelope is evicted.
DEFAULT_MAX_TRACES = 20_000
DEFAULT_MAX_SPANS = 200_000
#: Seconds an emitted envelope's key is remembered, so client retries stay idempotent.
DEFAULT_DEDUPE_WINDOW = 600.0
DEFAULT_DEDUPE_MAX = 100_000

REASON_TIMEOUT = "timeout"
REASON_EVICTED = "evicted"
REASON_SHUTDOWN = "shutdown"
REASON_NO_ENVELOPE_SPAN = "no_envelope_span"
REASON_MISSING_EVENTS = "missing_events"

ADDED = "added"
DUPLICATE = "duplicate"
#: a span id seen before with other content (the first kept, a repair in the bundle)
CONFLICT = "conflict"
LATE = "late"
FOREIGN = "foreign"

#: The mask of an envelope known only by its key (replayed): every span is a duplicate.
_ALL = (1 << 128) - 1

#: Bytes a remembered key costs (measured with tracemalloc: 276 for a 32-hex trace id and a
#: context id of 17 characters, in the tuple, the list of expiry, mask and time, the ordered
#: dict's slot and the owner map; the soak's RSS grew about 560 per key, allocator overhead
#: included), before a long context id's own size (``key_cost``).
KEY_COST = 512
_SMALL_ID = sys.getsizeof("x" * 17)
#: context ids up to this long cost KEY_COST (checked with len first: the common case)
_SHORT_ID = 64


def key_cost(context_id: str) -> int:
    """What remembering the key of an envelope with this context id costs: a context id
    of megabytes costs megabytes (counted as 512 bytes, 150 ids of 4 MB held 600 MB)."""
    if len(context_id) <= _SHORT_ID:
        return KEY_COST
    return KEY_COST + max(0, sys.getsizeof(context_id) - _SMALL_ID)


def _bit(span_id: str) -> int:
    # The low 7 bits of the span id (random in practice; deterministic, unlike hash()).
    return 1 << (int(span_id[-2:], 16) & 127)


@dataclasses.dataclass(slots=True)
class Accepted:
    """A span that belongs to an envelope: its view and the facts the buffer needs."""

    view: SpanView
    context_id: str
    is_envelope: bool
    span_count: int | None
    #: ``context.event_count`` of an envelope span: the log-based events it promised
    event_count: int | None = None
    #: bytes holding it costs (an estimate, for ``max_bytes``; 0: not counted)
    size: int = 0

    @classmethod
    def of(cls, view: SpanView, size: int = 0) -> Accepted | None:
        """``view`` (after the boundary) as an envelope's span (``size``: what holding it
        costs, 0 for not counted); None without a usable ``context.id`` (a non-empty
        string). ``processor._decode._accept`` builds a stage span's directly: keep the two
        alike."""
        attributes = view.attributes
        context_id = attributes.get(S.CONTEXT_ID)
        if not isinstance(context_id, str) or not context_id:
            return None
        is_envelope = S.CONTEXT_SCOPE in attributes
        span_count = attributes.get(S.CONTEXT_SPAN_COUNT) if is_envelope else None
        event_count = attributes.get(S.CONTEXT_EVENT_COUNT) if is_envelope else None
        # The boundary made the counts ints (or dropped them).
        return cls(view, context_id, is_envelope,
                   span_count if isinstance(span_count, int) else None,
                   event_count if isinstance(event_count, int) else None, size)


@dataclasses.dataclass(slots=True)
class Finished:
    """An envelope ready to rebuild: its spans and why it is partial (if it is)."""

    key: Key
    spans: list[SpanView]
    reasons: tuple[str, ...]
    segments: tuple[int, ...]
    last_arrival: float  # monotonic seconds of its last span
    #: spans of other traces that carried this envelope's context.id, left out
    repairs: tuple[Repair, ...] = ()
    #: bytes its spans and events cost (the sum of their sizes)
    size: int = 0


class _Pending:
    __slots__ = ("events", "expected", "expected_events", "has_envelope", "key", "repairs",
                 "last", "segments", "size", "spans")

    def __init__(self, key: Key, now: float) -> None:
        self.key = key
        self.repairs: list[Repair] = []
        self.spans: dict[str, SpanView] = {}
        self.has_envelope = False
        self.expected: int | None = None
        self.segments: list[int] = []
        self.last = now
        self.events = 0  # log-based events joined
        self.expected_events: int | None = None
        self.size = 0  # bytes of its spans and events

    def complete(self) -> bool:
        return (self.has_envelope and len(self.spans) - 1 >= (self.expected or 0)
                and self.events >= (self.expected_events or 0))


class TraceBuffer:
    """Pending envelopes, their timeouts and caps, and the memory of finished ones."""

    def __init__(
        self,
        *,
        envelope_timeout: float,
        orphan_timeout: float,
        max_traces: int,
        max_spans: int,
        dedupe_window: float,
        dedupe_max: int,
        clock: Callable[[], float] = time.monotonic,
        on_pin: Callable[[int], None] = lambda segment: None,
        max_events: int = 1_000_000,
        on_span: Callable[[Key, SpanView], tuple[int, Iterable[int], int]] = (
            lambda key, view: (0, (), 0)),
        on_finish: Callable[[Finished], None] = lambda finished: None,
        max_bytes: int | None = None,
        dedupe_bytes: int | None = None,
    ) -> None:
        self.envelope_timeout = envelope_timeout
        self.orphan_timeout = orphan_timeout
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.dedupe_window = dedupe_window
        self.dedupe_max = dedupe_max
        #: cap on :attr:`done_bytes` (None: only ``dedupe_max`` bounds the keys)
        self.dedupe_bytes = dedupe_bytes
        #: bytes the remembered keys hold (``key_cost`` each: a long context.id costs its size)
        self.done_bytes = 0
        self.clock = clock
        self.on_pin = on_pin
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.on_span = on_span
        self.on_finish = on_finish
        self.events_in_flight = 0
        # Both ordered by last activity, oldest first: the head is the next to time out.
        self._waiting: OrderedDict[Key, _Pending] = OrderedDict()  # envelope span is in
        #: envelopes whose envelope span came without a span count, finished by ``settle``
        self._uncounted: list[_Pending] = []
        self._orphans: OrderedDict[Key, _Pending] = OrderedDict()  # not yet
        self._traces: dict[str, int] = {}
        #: context id -> the trace that owns it (pending and remembered envelopes)
        self._owner: dict[str, str] = {}
        # key -> [expiry (monotonic), span id mask, wall time its bundle was written or None]
        self._done: OrderedDict[Key, list[Any]] = OrderedDict()
        self.spans_in_flight = 0
        #: bytes of the spans and events of pending envelopes
        self.held_bytes = 0
        #: finished envelopes not yet :meth:`release`-d (their bundles not written), and
        #: their bytes
        self.finished_envelopes = 0
        self.finished_bytes = 0
        self.evicted = 0
        #: (trace id, context id, key, pending) of the last span added, while that envelope
        #: is pending and last moved: the next span of the same envelope (most are: a
        #: request carries an envelope's spans together) skips the key's lookups. Holds only
        #: while every other change to ``_waiting``/``_orphans``/``_done`` goes through
        #: ``_finish``, ``attach`` or ``remember_done``, which forget it: a new method that
        #: moves or marks a key must forget it too
        self._last: tuple[str, str, Key, _Pending] | None = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def envelopes_in_flight(self) -> int:
        return len(self._waiting) + len(self._orphans)

    @property
    def traces_in_flight(self) -> int:
        return len(self._traces)

    def done_entries(self) -> list[tuple[Key, float]]:
        """Recently written keys with the wall time they were written (a WAL checkpoint).

        Finished envelopes whose bundles are not written yet are left out: a checkpoint
        must never claim an envelope the sinks have not taken.
        """
        return [(key, entry[2]) for key, entry in self._done.items() if entry[2] is not None]

    def release(self, written: Iterable[Finished]) -> None:
        """These finished envelopes are written: no longer held."""
        for finished in written:
            self.finished_envelopes -= 1
            self.finished_bytes -= finished.size

    def mark_written(self, key: Key, wall_time: float) -> None:
        entry = self._done.get(key)
        if entry is not None:
            entry[2] = wall_time

    def remember_done(self, key: Key, wall_time: float) -> None:
        """Mark a key written (on replay: its bundle was written before the restart)."""
        age = time.time() - wall_time
        self._last = None
        if age < self.dedupe_window:
            if key not in self._done:
                self.done_bytes += key_cost(key[1])
            self._done[key] = [self.clock() + self.dedupe_window - age, _ALL, wall_time]
            self._owner.setdefault(key[1], key[0])
            self._trim_done(self.clock())

    def is_done(self, key: Key) -> bool:
        return key in self._done

    def pending_span(self, key: Key, span_id: str) -> SpanView | None:
        """A span of the pending envelope ``key``, if it is there."""
        pending = self._waiting.get(key) or self._orphans.get(key)
        return pending.spans.get(span_id) if pending is not None else None

    # -- adding spans ----------------------------------------------------------------------------
    def add(self, span: Accepted, segment: int | None, out: list[Finished]) -> str:
        """Buffer one span; finished envelopes are appended to ``out``.

        Returns ``"added"``, ``"duplicate"`` or ``"late"``. ``segment`` is the WAL segment
        holding the span (None when it is not in a WAL); the first span of an envelope in a
        segment calls ``on_pin(segment)``, and the caller unpins ``Finished.segments`` once
        the bundle is written.
        """
        view = span.view
        now = self.clock()
        pending: _Pending | None
        last = self._last
        if last is not None and last[0] == view.trace_id and last[1] == span.context_id:
            key, pending = last[2], last[3]
            # not done (finishing forgets ``_last``), already last in its map
            if span.is_envelope and key in self._orphans:
                del self._orphans[key]
                self._waiting[key] = pending
        else:
            key = (view.trace_id, span.context_id)
            done = self._done.get(key)
            if done is not None:
                return DUPLICATE if done[1] & _bit(view.span_id) else LATE
            pending = self._waiting.get(key)
            if pending is None:
                pending = self._orphans.get(key)
                if pending is None:
                    owner = self._owner.get(span.context_id)
                    if owner is not None and owner != view.trace_id:
                        return self._foreign(span, owner, out)
                    self._owner[span.context_id] = view.trace_id
                    self._make_room(view.trace_id, out)
                    pending = _Pending(key, now)
                    # an envelope whose envelope span comes first waits envelope_timeout
                    (self._waiting if span.is_envelope else self._orphans)[key] = pending
                    self._traces[view.trace_id] = self._traces.get(view.trace_id, 0) + 1
                elif span.is_envelope:
                    del self._orphans[key]
                    self._waiting[key] = pending
                elif view.span_id in pending.spans:  # a retry: no activity, keeps its place
                    pass
                else:
                    self._orphans.move_to_end(key)
            elif view.span_id in pending.spans:  # likewise (the maps stay ordered by last)
                pass
            else:
                self._waiting.move_to_end(key)
            if view.span_id not in pending.spans:  # else not last in its map: no fast path
                self._last = (view.trace_id, span.context_id, key, pending)
        seen = pending.spans.get(view.span_id)
        if seen is not None:
            if not same_span(seen, view) and not any(
                    r.span_id == view.span_id for r in pending.repairs):
                pending.repairs.append(duplicate_span(view))
                return CONFLICT
            return DUPLICATE
        pending.spans[view.span_id] = view
        pending.last = now
        self.spans_in_flight += 1
        pending.size += span.size
        self.held_bytes += span.size
        if segment is not None and segment not in pending.segments:
            pending.segments.append(segment)
            self.on_pin(segment)
        joined, segments, joined_bytes = self.on_span(key, view)
        if joined:
            self._join(pending, joined, segments, joined_bytes)
        if span.is_envelope:
            # a second envelope span without counts (off-spec) does not erase the first's
            if not pending.has_envelope or span.span_count is not None:
                pending.expected = span.span_count
                pending.expected_events = span.event_count
            pending.has_envelope = True
        expected = pending.expected
        if (expected is not None and pending.has_envelope and len(pending.spans) - 1 >= expected
                and pending.events >= (pending.expected_events or 0)):
            # complete() inline, but for an envelope without a count: settle() finishes it
            # at the end of the batch (complete() still does once its events are in)
            out.append(self._finish(pending, ()))
        else:
            if expected is None and span.is_envelope:
                # off-spec: nothing says when it is done; finished at the end of the batch
                # (settle), so the batch's spans after its envelope span still join it
                self._uncounted.append(pending)
            if self.spans_in_flight > self.max_spans or self.events_in_flight > self.max_events:
                self._evict_oldest(out)
        if self.max_bytes is not None and self.held_bytes > self.max_bytes:
            self._trim_bytes(out)
        return ADDED

    def settle(self, out: list[Finished]) -> None:
        """End of a batch of :meth:`add` calls (one OTLP request, one worker round): finish
        the envelopes whose envelope span came without ``context.span_count`` and whose
        promised events (if any) are in. Nothing says when such an envelope is done: its
        spans sent after the envelope span in the same batch join it, later ones are late
        (as before this rule, when it finished at its envelope span)."""
        if not self._uncounted:
            return
        uncounted, self._uncounted = self._uncounted, []
        for pending in uncounted:
            if (self._waiting.get(pending.key) is pending and pending.expected is None
                    and pending.events >= (pending.expected_events or 0)):
                out.append(self._finish(pending, ()))

    def _trim_bytes(self, out: list[Finished]) -> None:
        """Past ``max_bytes``, evict the least recently active envelopes (never the last
        one: an envelope alone above the cap stays whole)."""
        if self.max_bytes is not None:
            while self.held_bytes > self.max_bytes and self.envelopes_in_flight > 1:
                self._evict_oldest(out)

    def attach(self, key: Key, events: int, segments: Iterable[int],
               out: list[Finished], size: int = 0) -> bool:
        """Count ``events`` log-based events (already put on their span by the event store,
        ``size`` bytes) for the pending envelope ``key``; False when it is not pending."""
        self._last = None  # another envelope may move last
        pending = self._waiting.get(key)
        if pending is not None:
            self._waiting.move_to_end(key)
        else:
            pending = self._orphans.get(key)
            if pending is None:
                return False
            self._orphans.move_to_end(key)
        pending.last = self.clock()
        self._join(pending, events, segments, size)
        if pending.complete():
            out.append(self._finish(pending, ()))
        elif self.events_in_flight > self.max_events:
            self._evict_oldest(out)
        self._trim_bytes(out)
        return True

    def _join(self, pending: _Pending, events: int, segments: Iterable[int],
              size: int = 0) -> None:
        pending.events += events
        self.events_in_flight += events
        pending.size += size
        self.held_bytes += size
        for segment in segments:
            if segment not in pending.segments:
                pending.segments.append(segment)
                self.on_pin(segment)

    def _foreign(self, span: Accepted, owner: str, out: list[Finished]) -> str:
        """A span of another trace than its envelope's: said in the owner's bundle while
        that is not written (pending, or finished by the same call: ``out``); after, only
        to the caller (who tells the sender)."""
        key = (owner, span.context_id)
        pending = self._waiting.get(key) or self._orphans.get(key)
        if pending is not None:
            if not any(r.span_id == span.view.span_id for r in pending.repairs):
                pending.repairs.append(foreign_trace(span.view, owner))
            return FOREIGN
        for finished in out:
            if finished.key == key:
                if not any(r.span_id == span.view.span_id for r in finished.repairs):
                    finished.repairs = (*finished.repairs, foreign_trace(span.view, owner))
                return FOREIGN
        return FOREIGN

    def _make_room(self, trace_id: str, out: list[Finished]) -> None:
        while self.envelopes_in_flight and (
            (trace_id not in self._traces and len(self._traces) >= self.max_traces)
            or self.spans_in_flight >= self.max_spans
            or (self.max_bytes is not None and self.held_bytes >= self.max_bytes)
        ):
            self._evict_oldest(out)

    def _evict_oldest(self, out: list[Finished]) -> None:
        heads = [d[next(iter(d))] for d in (self._waiting, self._orphans) if d]
        oldest = min(heads, key=lambda p: p.last)
        self.evicted += 1
        out.append(self._finish(oldest, (REASON_EVICTED,)))

    # -- finishing -------------------------------------------------------------------------------
    def _finish(self, pending: _Pending, reasons: tuple[str, ...]) -> Finished:
        self._last = None
        key = pending.key
        if self._waiting.pop(key, None) is None:
            self._orphans.pop(key, None)
        trace_id = key[0]
        remaining = self._traces[trace_id] - 1
        if remaining:
            self._traces[trace_id] = remaining
        else:
            del self._traces[trace_id]
        self.spans_in_flight -= len(pending.spans)
        self.events_in_flight -= pending.events
        self.held_bytes -= pending.size
        self.finished_envelopes += 1
        self.finished_bytes += pending.size
        if not pending.has_envelope:
            reasons = (REASON_NO_ENVELOPE_SPAN, *reasons)
        elif pending.events < (pending.expected_events or 0):
            reasons = (*reasons, REASON_MISSING_EVENTS)
        now = self.clock()
        mask = 0
        for span_id in pending.spans:
            mask |= 1 << (int(span_id[-2:], 16) & 127)  # _bit(span_id), inline
        if key not in self._done:
            context_id = key[1]
            self.done_bytes += (KEY_COST if len(context_id) <= _SHORT_ID
                                else key_cost(context_id))
        self._done[key] = [now + self.dedupe_window, mask, None]
        self._trim_done(now)
        finished = Finished(key, list(pending.spans.values()), reasons,
                            tuple(pending.segments), pending.last, tuple(pending.repairs),
                            pending.size)
        self.on_finish(finished)
        return finished

    def _trim_done(self, now: float) -> None:
        done = self._done
        cap = self.dedupe_bytes
        # the byte cap never forgets the newest key: a context id larger than the whole cap
        # would otherwise forget itself, and a retry of its envelope be written again
        while done and (len(done) > self.dedupe_max
                        or (cap is not None and self.done_bytes > cap and len(done) > 1)
                        or next(iter(done.values()))[0] <= now):
            (trace_id, context_id), _ = done.popitem(last=False)
            self.done_bytes -= (KEY_COST if len(context_id) <= _SHORT_ID
                                else key_cost(context_id))
            if self._owner.get(context_id) == trace_id and not self._pending_for(context_id):
                del self._owner[context_id]

    def _pending_for(self, context_id: str) -> bool:
        trace_id = self._owner.get(context_id)
        key = (trace_id or "", context_id)
        return key in self._waiting or key in self._orphans

    def expire(self, out: list[Finished]) -> None:
        """Finish every envelope whose wait is over (reason ``timeout``)."""
        now = self.clock()
        for pending_map, timeout in ((self._waiting, self.envelope_timeout),
                                     (self._orphans, self.orphan_timeout)):
            while pending_map:
                head = pending_map[next(iter(pending_map))]
                if head.last + timeout > now:
                    break
                out.append(self._finish(head, (REASON_TIMEOUT,)))
        self._trim_done(now)

    def next_deadline(self) -> float | None:
        """Monotonic time of the next timeout, if anything is waiting."""
        deadlines = [d[next(iter(d))].last + t for d, t in
                     ((self._waiting, self.envelope_timeout), (self._orphans, self.orphan_timeout))
                     if d]
        return min(deadlines) if deadlines else None

    def drain(self, reason: str) -> list[Finished]:
        """Finish everything still pending (graceful shutdown)."""
        out: list[Finished] = []
        for pending_map in (self._waiting, self._orphans):
            while pending_map:
                out.append(self._finish(pending_map[next(iter(pending_map))], (reason,)))
        return out

    def pending_keys(self) -> Iterable[Key]:
        yield from self._waiting
        yield from self._orphans
