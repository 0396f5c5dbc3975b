"""The event store with the buffer: log-based events held, joined, counted toward
``context.event_count``, bounded, timed out, deduplicated, late; their WAL pins."""

from __future__ import annotations

from collections import Counter

from processor_testkit import as_log_events, envelope_spans, log_event, logs_request, request

from otel_agent_context.processor._decode import decode_request
from otel_agent_context.processor._decode_logs import decode_logs_request
from otel_agent_context.rebuild._completion import (
    REASON_EVICTED,
    REASON_MISSING_EVENTS,
    REASON_TIMEOUT,
    TraceBuffer,
)
from otel_agent_context.rebuild._events import ACCEPTED, DUPLICATE, LATE, EventStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A buffer and its event store wired as the pipeline wires them, pins counted."""

    def __init__(self, **store: object) -> None:
        self.clock = Clock()
        self.pins: Counter[int] = Counter()
        self.orphaned = 0
        settings = dict(orphan_timeout=20.0, max_events=1000, max_bytes=1 << 20,
                        remember_for=60.0, remember_max=1000)
        settings.update(store)
        self.store = EventStore(clock=self.clock, pin=self._pin, unpin=self._unpin,
                                on_orphaned=self._orphaned, **settings)  # type: ignore[arg-type]
        self.buffer = TraceBuffer(
            envelope_timeout=5.0, orphan_timeout=20.0, max_traces=100, max_spans=1000,
            dedupe_window=60.0, dedupe_max=1000, clock=self.clock, on_pin=self._pin,
            max_events=int(store.get("max_events", 1000)),  # type: ignore[call-overload]
            on_span=self.store.on_span, on_finish=self.store.on_finish)
        self.store.buffer = self.buffer
        self.out: list = []

    def _pin(self, segment: int) -> None:
        self.pins[segment] += 1

    def _unpin(self, segment: int) -> None:
        self.pins[segment] -= 1
        assert self.pins[segment] >= 0

    def _orphaned(self, count: int) -> None:
        self.orphaned += count

    def spans(self, spans, segment: int = 1) -> list[str]:
        body = request(spans).SerializeToString()
        return [self.buffer.add(a, segment, self.out) for a in decode_request(body).accepted]

    def events(self, records, segment: int = 2) -> list[str]:
        body = logs_request(records).SerializeToString()
        return [self.store.add(e, segment, self.out) for e in decode_logs_request(body).events]

    def released(self) -> None:
        """What the pipeline does once a finished envelope's bundle is written."""
        for finished in self.out:
            for segment in finished.segments:
                self._unpin(segment)


def _turn(trace: int, cid: str):
    return as_log_events(envelope_spans(trace, cid, stages=2))


def test_events_before_their_span_are_held_then_joined_in_time_order() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    assert rig.events(records[::-1]) == [ACCEPTED] * 4  # newest first
    assert rig.store.held_events == 4 and rig.pins[2] == 2  # one pin per span waited for
    rig.spans(spans)
    (finished,) = rig.out
    assert finished.reasons == () and rig.store.held_events == 0
    selection = next(s for s in finished.spans if s.span_id == f"{2:016x}")
    assert [e.name for e in selection.events] == ["context.item.selected",
                                                  "context.item.omitted"]
    assert [e.time_unix_nano for e in selection.events] == sorted(
        e.time_unix_nano for e in selection.events)
    assert set(finished.segments) == {1, 2} and rig.pins[2] == 1  # now the envelope's pin
    rig.released()
    assert +rig.pins == Counter()


def test_event_count_holds_the_envelope_until_its_events_are_in() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    rig.spans(spans)
    assert rig.out == [] and rig.buffer.envelopes_in_flight == 1
    rig.events(records[:3])
    assert rig.out == []
    assert rig.events(records[3:]) == [ACCEPTED]
    assert len(rig.out) == 1 and rig.out[0].reasons == ()
    assert rig.buffer.events_in_flight == 0


def test_missing_events_at_the_timeout() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    rig.spans(spans)
    rig.events(records[:2])
    rig.clock.now += 6
    rig.buffer.expire(rig.out)
    (finished,) = rig.out
    assert finished.reasons == (REASON_TIMEOUT, REASON_MISSING_EVENTS)


def test_duplicates_held_joined_and_after_the_envelope() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    assert rig.events(records[:2] * 2) == [ACCEPTED, ACCEPTED, DUPLICATE, DUPLICATE]
    rig.spans(spans)
    assert rig.events(records[:3]) == [DUPLICATE, DUPLICATE, ACCEPTED]
    assert rig.events(records[3:]) == [ACCEPTED]
    (finished,) = rig.out
    assert sum(len(s.events) for s in finished.spans) == 4
    assert rig.events(records) == [DUPLICATE] * 4
    other = log_event(1, 2, "context.item.selected", {"context.item.id": "new"})
    assert rig.events([other]) == [LATE]


def test_held_events_are_bounded_by_count_and_bytes_oldest_dropped() -> None:
    rig = Rig(max_events=3)
    for span_id in range(10, 15):
        rig.events([log_event(1, span_id, "context.item.added", {"context.item.id": "a"})],
                   segment=span_id)
    assert rig.store.held_events == 3 and rig.orphaned == 2
    assert +rig.pins == Counter({12: 1, 13: 1, 14: 1})  # the dropped ones are unpinned
    small = Rig(max_bytes=900)
    for span_id in range(10, 15):
        small.events([log_event(1, span_id, "context.item.added", {"context.item.id": "a"})])
    assert 0 < small.store.held_bytes <= 900 and small.orphaned == 5 - small.store.held_events


def test_held_events_time_out_as_orphaned() -> None:
    rig = Rig()
    rig.events([log_event(1, 9, "context.item.added", {"context.item.id": "a"})], segment=4)
    rig.clock.now += 19
    assert rig.store.expire() == 0
    rig.events([log_event(1, 9, "context.item.added", {"context.item.id": "b"})], segment=4)
    rig.clock.now += 19  # the wait restarts with every event for the span
    assert rig.store.expire() == 0
    rig.clock.now += 2
    assert rig.store.expire() == 2 and rig.orphaned == 2
    assert rig.store.held_events == 0 and rig.pins[4] == 0


def test_attached_events_count_against_max_events() -> None:
    rig = Rig(max_events=3)
    spans, records = _turn(1, "c1")
    rig.spans(spans)
    rig.events(records[:3])
    assert rig.out == []
    rig.events(records[3:])
    (finished,) = rig.out  # complete: 4 events in, which the cap would not have allowed held
    assert finished.reasons == ()
    spans, records = _turn(2, "c2")
    rig.spans(spans[1:])  # no envelope span: nothing completes it
    rig.events(records)
    assert len(rig.out) == 2 and rig.out[1].reasons[-1] == REASON_EVICTED


def test_a_span_of_a_written_envelope_drops_what_was_held_for_it_as_late() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    rig.spans(spans[:2])  # envelope span and the first selection: complete without events?
    assert rig.out == []  # no: the second selection is missing
    rig.buffer.drain("shutdown")
    held = log_event(1, 3, "context.item.selected", {"context.item.id": "x"})
    assert rig.events([held]) == [ACCEPTED]
    assert rig.spans(spans[2:]) == [LATE]
    assert rig.store.span_done(f"{1:032x}", f"{3:016x}") == 1
    assert rig.store.held_events == 0
    assert rig.events([held]) == [DUPLICATE]


def test_only_written_envelopes_with_log_events_leave_their_spans_for_the_wal() -> None:
    rig = Rig()
    spans, records = _turn(1, "c1")
    rig.spans(spans)
    rig.events(records)
    plain = envelope_spans(2, "c2", stages=1)  # span events only: nothing to remember
    rig.spans(plain)
    assert [f.key[1] for f in rig.out] == ["c1", "c2"]
    assert rig.store.done_spans() == []  # finished is not written: a checkpoint must not say so
    listed = rig.store.written([f.key for f in rig.out], 1234.5)
    trace = f"{1:032x}"
    assert listed == [((trace, f"{n:016x}"), 1234.5) for n in (1, 2, 3)]
    assert rig.store.done_spans() == listed
    assert rig.store.written([rig.out[0].key], 1300.0) == []  # once
    # after a restart, a span listed as written makes its events duplicates, held or not
    again = Rig()
    again.events([log_event(1, 2, "context.item.selected", {"context.item.id": "x"})])
    for (trace_id, span_id), wall in listed:
        again.store.forget_written(trace_id, span_id, wall)
    assert again.store.held_events == 0
    assert again.events(records) == [DUPLICATE] * 4
