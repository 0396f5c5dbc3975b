"""Span views to Agent Context bundles (contract section 5).

``rebuild_envelope`` is a pure function from the spans of one envelope to its bundle; the
SDK ``BundleSpanProcessor`` feeds it in-process and the processor service feeds it from OTLP.
"""

from ._rebuild import group_by_context, rebuild, rebuild_envelope
from ._span_processor import BundleSpanProcessor
from ._view import EventView, SpanView, view_from_readable_span

__all__ = [
    "BundleSpanProcessor",
    "EventView",
    "SpanView",
    "group_by_context",
    "rebuild",
    "rebuild_envelope",
    "view_from_readable_span",
]
