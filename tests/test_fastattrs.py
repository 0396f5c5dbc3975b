"""``_fastattrs.set_attributes`` records exactly what the SDK's ``Span.set_attributes``
records: the same attributes in the same order, the same dropped count, the same warnings,
with and without span limits, on an ended span, for values it must leave to the SDK."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext

from otel_agent_context import _fastattrs
from otel_agent_context._fastattrs import set_attributes

PLAIN = {"a.str": "x", "a.int": 3, "a.float": 0.5, "a.bool": True,
         "a.strs": ["u:1", "u:2", ""], "a.ints": [1, -1, 0], "a.empty": [],
         "a.tuple": ("t", "u"), "a.mixed": [1, "x", True]}

CASES: dict[str, list[dict[str, Any]]] = {
    "plain": [PLAIN],
    "rewritten keys move to the end": [PLAIN, {"a.str": "y", "b.new": 1}],
    "None": [{"a": None, "b": 1}],
    "nested": [{"a": [[1], [2]]}],
    "bytes": [{"a": b"x"}],
    "mapping": [{"a": {"b": 1}}],
    "a None element": [{"a": ["x", None]}],
    "an object": [{"a": object()}],
    "an empty key": [{"": 1, "b": 2}],
    "a key not a string": [{3: 1, "b": 2}],
}


def _spans(limits: SpanLimits | None, writes: list[dict[str, Any]], write: Any,
           end_first: bool = False) -> tuple[list[Any], int, list[str]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s", attributes={"start": "v"})
    if end_first:
        span.end()
    for attrs in writes:
        write(span, dict(attrs))
    if not end_first:
        span.end()
    (finished,) = exporter.get_finished_spans()
    return list(finished.attributes.items()), finished.dropped_attributes, []


def _sdk(span: Any, attrs: dict[str, Any]) -> None:
    span.set_attributes(attrs)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("limits", [None, SpanLimits(max_span_attributes=6),
                                    SpanLimits(max_attribute_length=2)],
                         ids=["default", "count limit", "length limit"])
def test_same_as_the_sdk(case: str, limits: SpanLimits | None,
                         caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ours = _spans(limits, CASES[case], set_attributes)
        ours_logs = [r.getMessage() for r in caplog.records]
        caplog.clear()
        sdk = _spans(limits, CASES[case], _sdk)
        sdk_logs = [r.getMessage() for r in caplog.records]
    assert ours == sdk
    assert ours_logs == sdk_logs
    assert all(not isinstance(v, list) for _, v in ours[0])  # arrays stored as tuples


def test_ended_span_warns_as_the_sdk_does(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        ours = _spans(None, [PLAIN], set_attributes, end_first=True)
        ours_logs = [r.getMessage() for r in caplog.records]
        caplog.clear()
        sdk = _spans(None, [PLAIN], _sdk, end_first=True)
        sdk_logs = [r.getMessage() for r in caplog.records]
    assert ours == sdk
    assert ours_logs == sdk_logs == ["Setting attribute on ended span."]


def test_the_short_path_is_taken_for_plain_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain values on an SDK span with default limits skip the SDK's per-value check;
    anything else goes through it."""
    checked: list[Any] = []
    import opentelemetry.attributes as attributes

    real = attributes._clean_attribute_value

    def counting(value: Any, limit: Any) -> Any:
        checked.append(value)
        return real(value, limit)

    provider = TracerProvider()
    span = provider.get_tracer("t").start_span("s")
    monkeypatch.setattr(attributes, "_clean_attribute_value", counting)
    set_attributes(span, PLAIN)
    assert checked == []
    set_attributes(span, {"a": None})
    assert checked  # through the SDK
    assert span.attributes["a.strs"] == ("u:1", "u:2", "")


def test_other_spans_get_set_attributes() -> None:
    got: list[Any] = []

    class Recording(NonRecordingSpan):
        def set_attributes(self, attributes: Any) -> None:
            got.append(dict(attributes))

    span = Recording(SpanContext(1, 1, False))
    set_attributes(span, PLAIN)
    assert got == [PLAIN]
    assert _fastattrs._plain(PLAIN)


def _checked(span: Any, attrs: dict[str, Any]) -> None:
    set_attributes(span, attrs, checked=True)


TUPLES = {k: tuple(v) if isinstance(v, list) else v for k, v in PLAIN.items()}


@pytest.mark.parametrize("writes", [[PLAIN], [TUPLES], [TUPLES, {"a.str": "y", "b.new": (1,)}],
                                    [PLAIN, TUPLES]],
                         ids=["lists", "tuples", "a key rewritten", "all keys rewritten"])
@pytest.mark.parametrize("limits", [None, SpanLimits(max_span_attributes=6),
                                    SpanLimits(max_attribute_length=2)],
                         ids=["default", "count limit", "length limit"])
def test_a_checked_write_is_the_sdks_too(writes: list[dict[str, Any]],
                                         limits: SpanLimits | None,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """Values the caller built itself (``checked``) are not looked at, and are recorded
    as the SDK records them: arrays as tuples, a rewritten key at the end, the limits."""
    with caplog.at_level(logging.WARNING):
        ours = _spans(limits, writes, _checked)
        ours_logs = [r.getMessage() for r in caplog.records]
        caplog.clear()
        sdk = _spans(limits, writes, _sdk)
        sdk_logs = [r.getMessage() for r in caplog.records]
    assert ours == sdk
    assert ours_logs == sdk_logs
    assert all(not isinstance(v, list) for _, v in ours[0])


def test_a_checked_write_skips_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("checked")

    import opentelemetry.attributes as attributes

    span = TracerProvider().get_tracer("t").start_span("s")
    monkeypatch.setattr(attributes, "_clean_attribute_value", refuse)
    monkeypatch.setattr(_fastattrs, "_plain", refuse)
    set_attributes(span, TUPLES, checked=True)
    set_attributes(span, {"a.str": "z", "a.strs": ["v"]}, checked=True)  # the loop's path
    assert list(span.attributes.items())[-2:] == [("a.str", "z"), ("a.strs", ("v",))]
    assert span.attributes["a.ints"] == (1, -1, 0)


def test_a_text_subclass_among_item_ids_takes_the_checked_write() -> None:
    """An application's id of a ``str`` subclass (an enum member) is not ours by construction:
    an SDK older than 1.45 drops a whole array holding one, so the SDK's own check decides."""
    import enum

    from otel_agent_context._folded import _ours

    class Ids(enum.StrEnum):
        FIRST = "msg_app_1"

    assert _ours(["a", "b"], 10, None, "truncate")
    assert _ours([], None, None, None)
    assert not _ours(["a", Ids.FIRST], None, None, None)
    assert not _ours(["a", 3], None, None, None)
    assert not _ours(["a"], True, None, None)
