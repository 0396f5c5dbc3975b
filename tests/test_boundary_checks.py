"""The boundary's checks on span views as the SDK gives them (in process), one rule a test.

The OTLP side of the same checks is in tests/processor/test_decode.py.
"""

from __future__ import annotations

import math

import orjson
import pytest

from otel_agent_context.rebuild import EventView, SpanView
from otel_agent_context.rebuild._boundary import normalize_view


def _view(attributes: dict, events: tuple = ()) -> SpanView:
    return SpanView(trace_id="ab" * 16, span_id="cd" * 8, name="context.budget",
                    start_time_unix_nano=1_000, end_time_unix_nano=2_000,
                    attributes={"context.id": "c", **attributes}, events=list(events))


@pytest.mark.parametrize(("key", "sent", "kept", "kind"), [
    ("context.budget.utilization", math.nan, None, "non_finite"),
    ("context.budget.utilization", -math.inf, None, "non_finite"),
    ("context.budget.utilization", 1, 1.0, None),  # an int where a double is due: as it is
    ("context.budget.max_tokens", 8192.0, 8192, None),  # a whole double where an int is due
    ("context.budget.max_tokens", 2 ** 70, None, "type"),
    ("context.budget.max_tokens", "4096", 4096, "type"),
    ("context.budget.overflow", "yes", None, "type"),
    ("context.span_count", -1, None, "type"),
    ("context.budget.target", "MODEL", "model", "enum_case"),
    ("context.budget.target", "tv", None, "enum_dropped"),  # visibility has no custom
    ("context.budget.overflow_strategy", 3, "custom", "enum_custom"),
    ("context.missing.severity", "critical", None, "enum_dropped"),
    ("context.assembly.visibility", ("model", "Tool", "nope"), ["model", "tool"],
     "enum_dropped"),
    ("context.compaction.loss_notes", "one note", ["one note"], "type"),
    ("context.budget.id", 12, "12", "type"),
])
def test_each_rule(key, sent, kept, kind) -> None:
    view = normalize_view(_view({key: sent}))
    if kept is None:
        assert key not in view.attributes
    else:
        assert view.attributes[key] == kept and type(view.attributes[key]) is type(kept)
    assert [r.kind for r in view.repairs] == ([kind] if kind else [])
    assert view.attributes["context.id"] == "c"  # the rest is kept


def test_valid_attributes_and_events_are_not_copied() -> None:
    attributes = {"context.budget.max_tokens": 10, "context.budget.target": "model",
                  "gen_ai.agent.name": "a", "vendor.anything": [1, 2]}
    event = EventView("context.window.segment", 1_500, {"context.window.segment": "history"})
    view = _view(attributes, (event,))
    original = view.attributes
    normalize_view(view)
    assert view.attributes is original and view.events[0] is event and view.repairs == []


def test_events_lacking_what_they_must_carry_are_dropped_alone() -> None:
    view = normalize_view(_view({}, (
        EventView("context.window.segment", 1_100, {}),
        EventView("context.budget.truncated", 1_200, {"context.truncation.tokens_before": 9}),
        EventView("context.budget.truncated", 0, {"context.window.segment": "history"}),
    )))
    assert [(e.name, e.time_unix_nano) for e in view.events] == [
        ("context.budget.truncated", 1_000)]  # the undated one, dated at the span's start
    assert [(r.kind, r.field) for r in view.repairs] == [
        ("event_dropped", "context.window.segment"),
        ("event_dropped", "context.budget.truncated"),
        ("event_time", "context.budget.truncated")]
    assert "lacks context.item.id or context.window.segment" in view.repairs[1].action


def test_the_boundary_runs_once() -> None:
    view = normalize_view(_view({"context.budget.target": "MODEL"}))
    again = normalize_view(view)
    assert again is view and len(view.repairs) == 1


@pytest.mark.parametrize(("start", "end", "events", "fixed"), [
    (1_000, 0, (1_500,), (1_000, 1_500)),  # no end: the last known time
    (1_000, 900, (), (1_000, 1_000)),  # an end before the start
    (0, 2_000, (1_200,), (1_200, 2_000)),  # no start: the first known time
])
def test_missing_or_reversed_span_times_are_repaired(start, end, events, fixed) -> None:
    view = _view({}, tuple(EventView("context.window.segment", t,
                                     {"context.window.segment": "history"}) for t in events))
    view.start_time_unix_nano, view.end_time_unix_nano = start, end
    normalize_view(view)
    assert (view.start_time_unix_nano, view.end_time_unix_nano) == fixed
    assert [r.kind for r in view.repairs] == ["span_time"]


def test_an_empty_enum_value_counts_as_absent() -> None:
    view = normalize_view(_view({}, (EventView("context.item.omitted", 1_500, {
        "context.item.id": "d1", "context.omission.reason": ""}),)))
    assert view.events == []  # an omission needs its reason
    assert [r.kind for r in view.repairs] == ["enum_dropped", "event_dropped"]


def test_a_bundle_json_cannot_carry_is_made_writable_and_said() -> None:
    from otel_agent_context.rebuild._encode import encode_bundle

    bundle = {"context_envelope": {"context_id": "c", "metadata": {"k\udc80": "v",
                                                                    "big": 1 << 70}},
              "rebuild": {"status": "complete"}}
    line = encode_bundle(bundle)
    written = orjson.loads(line)
    assert written["context_envelope"]["metadata"] == {"k\ufffd": "v", "big": str(1 << 70)}
    assert written["rebuild"]["status"] == "partial"
    assert written["rebuild"]["partial_reasons"] == ["repaired"]
    assert sorted(r["kind"] for r in written["rebuild"]["repairs"]) == ["text", "text"]
    clean = {"context_envelope": {"context_id": "c"}, "rebuild": {"status": "complete"}}
    assert encode_bundle(clean) == orjson.dumps(clean) + b"\n"


def test_keys_that_meet_once_made_writable_keep_both_values() -> None:
    # Two keys that differ only in a lone surrogate (or one of them already holding U+FFFD)
    # become the same key once repaired: neither value may vanish.
    from otel_agent_context.rebuild._encode import encode_bundle

    metadata = {"k" + chr(0xDC80): "a", "k" + chr(0xDC81): "b", "k\ufffd": "c"}
    bundle = {"context_envelope": {"context_id": "c", "metadata": metadata},
              "rebuild": {"status": "complete"}}
    written = orjson.loads(encode_bundle(bundle))
    assert sorted(written["context_envelope"]["metadata"].values()) == ["a", "b", "c"]
    assert written["rebuild"]["status"] == "partial"
