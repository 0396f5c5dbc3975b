"""A context event on an SDK span without the SDK checking again what the table typed.

``Span.add_event`` wraps the attributes in a ``BoundedAttributes``, which checks and copies
every value: about 70% of the cost of recording a context event, on the agent's thread.
The API builds each event's attributes from the generated table, so their values are
already strings, ints, floats and bools under known keys. When that holds for an event and
the span's limits would change nothing (no value length limit, the count within the event
limit), the event is handed to the SDK span as the ``Event`` its ``add_event`` would have
built; otherwise the public ``add_event`` runs. The SDK span's ``_add_event`` (the part of
``add_event`` after the check: the ended-span check, the lock, the event count limit) is
private: when a later SDK lacks it, every event takes the public path.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import Span as SdkSpan

__all__ = ["add_event"]

_SCALARS = frozenset({str, int, float, bool})
_FAST = callable(getattr(SdkSpan, "_add_event", None))
_SDK_ADD_EVENT = SdkSpan.add_event


def add_event(span: Any, name: str, attributes: dict[str, Any], timestamp: int | None) -> None:
    """``span.add_event(name, attributes, timestamp)``, as the SDK would record it."""
    # The SDK's own add_event only: a subclass or a proxy (which passes isinstance) that
    # overrides it, e.g. to redact, gets every event through its override.
    if _FAST and isinstance(span, SdkSpan) and type(span).add_event is _SDK_ADD_EVENT:
        limits = span._limits
        limit = limits.max_event_attributes
        if limits.max_attribute_length is None and (limit is None or len(attributes) <= limit):
            for value in attributes.values():
                if type(value) not in _SCALARS:
                    break
            else:
                span._add_event(Event(name, attributes, timestamp))
                return
    span.add_event(name, attributes, timestamp)
