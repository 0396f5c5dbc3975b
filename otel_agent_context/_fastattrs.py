"""Writing our own attributes on an SDK span without the SDK checking each value again.

``Span.set_attributes`` passes every value, and every element of every array, through the
SDK's ``_clean_attribute_value``: a Python call and up to six ``isinstance`` checks each,
~5K instructions a value. An auto-instrumented model call writes ~45 attributes holding
~110 values (the folded arrays), so the checks cost more than util-genai's whole inference
invocation (~400K instructions of ~1.5M a call, callgrind, Anthropic benchmark request).

The values we write are built by our own code from plain ``str``, ``int``, ``float`` and
``bool`` (and lists of them), so the per-value check can only confirm them. :func:`set_attributes`
checks them in bulk (one ``type`` per attribute, ``set(map(type, v))`` per array: C loops)
and stores exactly what the SDK would store (arrays as tuples, a rewritten key moved to the
end), under the same locks. It writes through the SDK's own ``set_attributes`` whenever
anything differs from that plain case: not the SDK's ``Span`` or ``BoundedAttributes``, a
value of another type (``None``, nested, bytes, a mapping), a string length limit
(``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``: truncation), a count limit that this write would
reach (the SDK drops the oldest, with a warning), an ended span (the SDK warns). What is
recorded is the same either way (``tests/test_fastattrs.py``). Events take the same
shortcut in :mod:`._sdk_events`.

A caller that built every value itself (``checked=True``: the folded call's records, whose
ids, digests, kinds and token counts are ours by construction) skips even the bulk check:
for an instance of ``str``, ``int``, ``float`` or ``bool``, or a list or tuple of them, the
SDK's check returns the value unchanged (a list as a tuple), so there is nothing for it to
find. Such a write whose arrays are tuples already is one ``dict.update`` (after dropping
the keys it rewrites, which the SDK moves to the end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as _sdk_trace

from ._sdk_events import _SCALARS  # the values the event path takes as they are, too

_PublicSpan = _sdk_trace.Span
#: what the SDK's tracers create (private: an SDK without it leaves the public class alone)
_SdkSpan = getattr(_sdk_trace, "_Span", _PublicSpan)

__all__ = ["set_attributes"]

_LIST = list


def set_attributes(span: Any, attrs: Mapping[str, Any], checked: bool = False) -> None:
    """``span.set_attributes(attrs)``, without the per-value checks when every value is a
    plain scalar or a flat list of them (see the module's docstring). ``checked``: the
    caller vouches for that (every key a non-empty string, every value an instance of
    ``str``, ``int``, ``float`` or ``bool`` or a list or tuple of such, built by our own code);
    then the values are not looked at, and with tuples for arrays and only keys the span does
    not hold yet they are stored in one update."""
    if (type(span) is not _SdkSpan and type(span) is not _PublicSpan) or not (
            checked or _plain(attrs)):
        span.set_attributes(attrs)
        return
    written = False
    try:
        bounded = span._attributes
        if (type(bounded) is BoundedAttributes and bounded.max_value_len is None
                and not bounded._immutable):
            with span._lock:
                if span._end_time is None:
                    with bounded._lock:
                        stored = bounded._dict
                        maxlen = bounded.maxlen
                        if maxlen is None or len(stored) + len(attrs) <= maxlen:
                            if checked and _LIST not in set(map(type, attrs.values())):
                                # tuples: as the loop stores, a rewritten key moved to the
                                # end (dropped first, then added in the write's order)
                                for key in stored.keys() & attrs.keys():
                                    del stored[key]
                                stored.update(attrs)
                                attrs = {}
                            for key, value in attrs.items():
                                if key in stored:
                                    del stored[key]
                                stored[key] = tuple(value) if type(value) is list else value
                            written = True
    except AttributeError:  # an SDK whose internals are not the ones we know: its own way
        written = False
    if not written:  # a limit to apply, or an ended span to warn about: the SDK's way
        span.set_attributes(attrs)


def _plain(attrs: Mapping[str, Any]) -> bool:
    """Every key a non-empty string, every value a scalar or a flat list or tuple of
    scalars."""
    scalars = _SCALARS
    for key, value in attrs.items():
        kind = type(value)
        if kind in scalars:
            if type(key) is not str or not key:
                return False
            continue
        if (kind is not list and kind is not tuple) or not set(map(type, value)) <= scalars:
            return False
        if type(key) is not str or not key:
            return False
    return True
