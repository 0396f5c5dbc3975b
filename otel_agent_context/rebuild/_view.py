"""The neutral span view the rebuild reads.

Both feeds produce it: SDK ``ReadableSpan`` in-process (:func:`view_from_readable_span`)
and OTLP protobuf in the processor. Ids are lowercase hex strings (32 and 16 characters);
times are nanoseconds since the epoch; attribute values are ``str``, ``int``, ``float``,
``bool`` or a tuple/list of one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

AttributeValue = Union[  # noqa: UP007 - a runtime alias, kept importable on 3.10
    str, int, float, bool, Sequence[str], Sequence[int], Sequence[float], Sequence[bool]]
#: Values are AttributeValue; typed Any because the rebuild checks each value where it reads it.
Attributes = Mapping[str, Any]

__all__ = ["AttributeValue", "Attributes", "EventView", "SpanView", "view_from_readable_span"]


@dataclass(slots=True)
class EventView:
    name: str
    time_unix_nano: int
    attributes: Attributes = field(default_factory=dict)


@dataclass(slots=True)
class SpanView:
    trace_id: str
    span_id: str
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Attributes = field(default_factory=dict)
    events: Sequence[EventView] = ()
    parent_span_id: str | None = None
    dropped_attributes_count: int = 0
    dropped_events_count: int = 0
    links: Sequence[tuple[str, str]] = ()  # (trace_id, span_id)
    status_code: int = 0  # 0 unset, 1 ok, 2 error (OTLP numbering)
    resource: Attributes = field(default_factory=dict)
    #: what the boundary (``_boundary``) changed; ``checked`` once it has run
    repairs: list[Any] = field(default_factory=list)
    checked: bool = False


def view_from_readable_span(span: Any) -> SpanView:
    """Build a :class:`SpanView` from an SDK ``ReadableSpan``."""
    ctx = span.context
    parent = span.parent
    # Plain dicts: the SDK's BoundedAttributes answers .get() through the Mapping mixin,
    # several times slower than a dict, and the rebuild reads every attribute.
    events = [
        EventView(ev.name, ev.timestamp, dict(ev.attributes) if ev.attributes else {})
        for ev in span.events
    ]
    links = [
        (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x"))
        for link in span.links
    ]
    return SpanView(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        name=span.name,
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        attributes=dict(span.attributes) if span.attributes else {},
        events=events,
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        dropped_attributes_count=span.dropped_attributes,
        dropped_events_count=span.dropped_events,
        links=links,
        status_code=int(span.status.status_code.value) if span.status is not None else 0,
        resource=span.resource.attributes if span.resource is not None else {},
    )
