"""The trace buffer: the completion rule, timeouts, caps, duplicates and late spans."""

from __future__ import annotations

from processor_testkit import envelope_spans, request, span

from otel_agent_context.processor._decode import decode_request
from otel_agent_context.rebuild._completion import (
    DUPLICATE,
    LATE,
    REASON_EVICTED,
    REASON_NO_ENVELOPE_SPAN,
    REASON_SHUTDOWN,
    REASON_TIMEOUT,
    TraceBuffer,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def accepted(spans):
    return decode_request(request(spans).SerializeToString()).accepted


def make(clock: Clock, **kwargs) -> TraceBuffer:
    settings = dict(envelope_timeout=5.0, orphan_timeout=20.0, max_traces=100,
                    max_spans=1000, dedupe_window=60.0, dedupe_max=1000)
    settings.update(kwargs)
    return TraceBuffer(clock=clock, **settings)


def test_complete_as_soon_as_promised_spans_are_in_envelope_last() -> None:
    buffer = make(Clock())
    env, *stages = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    for stage in stages:
        buffer.add(stage, None, out)
    assert out == [] and buffer.envelopes_in_flight == 1
    buffer.add(env, None, out)
    assert len(out) == 1 and out[0].reasons == () and len(out[0].spans) == 3
    assert buffer.envelopes_in_flight == 0 and buffer.spans_in_flight == 0


def test_complete_with_envelope_first() -> None:
    buffer = make(Clock())
    env, first, second = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    buffer.add(env, None, out)
    buffer.add(first, None, out)
    assert out == []
    buffer.add(second, None, out)
    assert [f.key for f in out] == [(f"{1:032x}", "c1")]


def test_missing_stage_span_times_out_partial() -> None:
    clock = Clock()
    buffer = make(clock)
    env, first, _ = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    buffer.add(first, None, out)
    clock.now += 3
    buffer.add(env, None, out)
    clock.now += 4.9  # the wait counts from the last span
    buffer.expire(out)
    assert out == []
    clock.now += 0.2
    buffer.expire(out)
    assert len(out) == 1 and out[0].reasons == (REASON_TIMEOUT,)


def test_envelope_span_first_then_a_missing_stage_times_out_after_envelope_timeout() -> None:
    clock = Clock()
    buffer = make(clock)
    env, first, _ = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    buffer.add(env, None, out)
    buffer.add(first, None, out)
    clock.now += 5.1  # envelope_timeout (5), not orphan_timeout (20): the envelope span is in
    buffer.expire(out)
    assert len(out) == 1 and out[0].reasons == (REASON_TIMEOUT,)


def test_envelope_span_never_comes() -> None:
    clock = Clock()
    buffer = make(clock)
    _, *stages = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    for stage in stages:
        buffer.add(stage, None, out)
    clock.now += 10  # past envelope_timeout but within orphan_timeout
    buffer.expire(out)
    assert out == []
    clock.now += 11
    buffer.expire(out)
    assert out[0].reasons == (REASON_NO_ENVELOPE_SPAN, REASON_TIMEOUT)
    assert buffer.next_deadline() is None


def test_max_traces_evicts_the_oldest_partial_never_drops() -> None:
    clock = Clock()
    buffer = make(clock, max_traces=2)
    out: list = []
    for trace in (1, 2, 3):
        clock.now += 1
        _, stage, _ = accepted(envelope_spans(trace, f"c{trace}", stages=2))
        buffer.add(stage, None, out)
    assert [f.key[1] for f in out] == ["c1"]
    assert out[0].reasons == (REASON_NO_ENVELOPE_SPAN, REASON_EVICTED)
    assert buffer.traces_in_flight == 2 and buffer.evicted == 1


def test_max_spans_evicts() -> None:
    buffer = make(Clock(), max_spans=3)
    out: list = []
    for trace in (1, 2):
        for stage in accepted(envelope_spans(trace, f"c{trace}", stages=3))[1:]:
            buffer.add(stage, None, out)
    assert [f.key[1] for f in out] == ["c1"]
    assert buffer.spans_in_flight <= 3


def test_duplicates_and_late_spans_after_emission() -> None:
    buffer = make(Clock())
    spans = accepted(envelope_spans(1, "c1", stages=1))
    out: list = []
    for s in spans:
        assert buffer.add(s, None, out) == "added"
    assert len(out) == 1
    assert buffer.add(spans[1], None, out) == DUPLICATE
    late = accepted([span(1, 99, "context.surface", {"context.id": "c1"})])[0]
    assert buffer.add(late, None, out) == LATE
    assert len(out) == 1


def test_duplicate_within_pending_envelope() -> None:
    buffer = make(Clock())
    _, stage, _ = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    assert buffer.add(stage, None, out) == "added"
    assert buffer.add(stage, None, out) == DUPLICATE
    assert buffer.spans_in_flight == 1


def test_drain_and_pins() -> None:
    pins: list[int] = []
    buffer = TraceBuffer(envelope_timeout=5, orphan_timeout=5, max_traces=10, max_spans=10,
                         dedupe_window=5, dedupe_max=10, on_pin=pins.append)
    _, stage, other = accepted(envelope_spans(1, "c1", stages=2))
    out: list = []
    buffer.add(stage, 3, out)
    buffer.add(other, 3, out)
    buffer.add(accepted(envelope_spans(2, "c2", stages=2))[1], 4, out)
    assert pins == [3, 4]
    drained = buffer.drain(REASON_SHUTDOWN)
    assert sorted(f.segments for f in drained) == [(3,), (4,)]
    assert all(REASON_SHUTDOWN in f.reasons for f in drained)


def test_done_entries_only_for_written_keys() -> None:
    buffer = make(Clock())
    out: list = []
    for s in accepted(envelope_spans(1, "c1", stages=1)):
        buffer.add(s, None, out)
    assert buffer.done_entries() == []  # finished, not yet written
    buffer.mark_written(out[0].key, 1234.0)
    assert buffer.done_entries() == [(out[0].key, 1234.0)]


def test_a_key_larger_than_the_byte_cap_still_remembers_itself() -> None:
    """The byte cap forgets the oldest keys, never the newest: an envelope whose context id
    alone is over the cap is still known, and a retry of it is a duplicate, not a second
    bundle (before, it forgot itself at once)."""
    buffer = make(Clock())
    buffer.dedupe_bytes = 4096
    out: list = []
    (small,) = accepted(envelope_spans(1, "small", stages=0))
    (big,) = accepted(envelope_spans(2, "B" * 10_000, stages=0))
    buffer.add(small, None, out)
    buffer.add(big, None, out)
    assert len(out) == 2
    assert buffer.add(big, None, out) == DUPLICATE and len(out) == 2
    assert buffer.done_bytes > 4096  # the one key kept, over the cap


def test_the_envelope_active_last_is_evicted_last_after_events_join_another() -> None:
    """A span of the envelope that had the previous span still makes it the most recently
    active, after log-based events joined another envelope in between (which moved that
    one): the oldest is evicted, whatever the buffer remembers of the last span added."""
    buffer = make(Clock(), max_spans=3)
    _, *a = accepted(envelope_spans(1, "a", stages=3))
    _, *b = accepted(envelope_spans(2, "b", stages=3, base_span=10))
    out: list = []
    buffer.add(a[0], None, out)
    buffer.add(b[0], None, out)
    buffer.add(a[1], None, out)  # a active last
    assert buffer.attach((f"{2:032x}", "b"), 0, (), out)  # then b
    buffer.add(a[2], None, out)  # then a again: b is the oldest, past max_spans
    assert [(f.key[1], f.reasons) for f in out] == [("b", (REASON_NO_ENVELOPE_SPAN,
                                                          REASON_EVICTED))]


def test_an_envelope_span_without_a_span_count_takes_the_spans_sent_after_it_in_its_batch(
) -> None:
    """Off-spec (``context.span_count`` absent or dropped by the boundary): nothing says the
    envelope is done, so it is finished at the end of the batch that brought its envelope
    span (``settle``: one request), with the stage spans sent after it in that batch (a
    foreign emitter's order), not at its envelope span with those spans refused as late;
    a span of a later batch is late, as before."""
    clock = Clock()
    buffer = make(clock)
    env, *stages = envelope_spans(1, "c1", stages=3)
    del env.attributes[[kv.key for kv in env.attributes].index("context.span_count")]
    env, first, second, third = accepted([env, *stages])
    assert env.span_count is None
    out: list = []
    assert [buffer.add(one, None, out) for one in (env, first, second)] == ["added"] * 3
    assert out == []
    buffer.settle(out)
    assert len(out) == 1 and len(out[0].spans) == 3 and out[0].reasons == ()
    assert buffer.envelopes_in_flight == 0
    assert buffer.add(third, None, out) == LATE
    buffer.settle(out)
    assert len(out) == 1


def test_settle_leaves_counted_envelopes_and_envelopes_without_their_span_alone() -> None:
    buffer = make(Clock())
    env, first, _ = accepted(envelope_spans(1, "c1", stages=2))  # counted: waits for 2
    _, orphan, _ = accepted(envelope_spans(2, "c2", stages=2))  # its envelope span not in
    out: list = []
    for one in (env, first, orphan):
        buffer.add(one, None, out)
    buffer.settle(out)
    assert out == [] and buffer.envelopes_in_flight == 2


def test_a_retried_span_does_not_hide_its_envelope_behind_newer_ones() -> None:
    """A retry (same span id) is no activity: it must not move its envelope behind envelopes
    active later, where ``expire`` (which looks at the head) reached it only after them."""
    clock = Clock()
    buffer = make(clock)
    (env_b,) = accepted(envelope_spans(1, "b", stages=1)[:1])  # its stage never comes
    out: list = []
    buffer.add(env_b, None, out)
    clock.now += 2
    env_c, stage_c, _ = accepted(envelope_spans(2, "c", stages=2))
    buffer.add(env_c, None, out)
    buffer.add(stage_c, None, out)
    clock.now += 2
    assert buffer.add(env_b, None, out) == DUPLICATE
    assert buffer.next_deadline() == 105.0  # b's: 100 + 5
    clock.now = 105.1
    buffer.expire(out)
    assert [(f.key[1], f.reasons) for f in out] == [("b", (REASON_TIMEOUT,))]


def test_a_second_envelope_span_without_a_count_keeps_the_first_ones() -> None:
    """Off-spec: a stage span that also carries ``context.scope`` but no count (a foreign
    folded call) must not erase the envelope span's count: the envelope still completes
    when the promised spans are in, not only at the timeout."""
    env, first, second = envelope_spans(1, "c1", stages=2)
    first.attributes.add(key="context.scope").value.string_value = "turn"
    out: list = []
    buffer = make(Clock())
    for one in accepted([env, first, second]):
        assert buffer.add(one, None, out) == "added"
    assert [(len(f.spans), f.reasons) for f in out] == [(3, ())]
