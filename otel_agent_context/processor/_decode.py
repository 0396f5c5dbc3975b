"""OTLP trace requests -> neutral span views, with the fast path and the checks at the door.

Cost decides the shape (see benchmarks/processor.md): parsing with upb is about 1 µs a
span, turning 20 attributes into Python objects about 15 µs. So:

* a request whose bytes contain neither ``context.`` nor ``gen_ai.`` is all fast path:
  parsed (to validate it and count its spans) and never walked;
* otherwise a span is walked only if its name starts with ``context.`` or its own bytes
  contain one of the two prefixes; the rest are fast path;
* walked spans become :class:`~otel_agent_context.rebuild._view.SpanView` and are checked
  against the contract's wire types (``_types``); a span that cannot be used is rejected
  with a message (OTLP partial success), never silently dropped.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
from collections.abc import Iterable
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .. import _semconv as S
from ..rebuild._view import EventView, SpanView
from ._types import (
    DOUBLE,
    EXPECTED,
    INT,
    REQUIRED_EVENT_ATTRIBUTES,
    STRING,
    STRING_ARRAY,
    expected_type,
)

__all__ = [
    "Accepted",
    "Decoded",
    "InvalidRequest",
    "decode_request",
    "json_to_protobuf",
    "parse_protobuf",
]

_NEEDLES = (b"context.", b"gen_ai.")
_CONTEXT_PREFIX = "context."
_GENAI_PREFIX = "gen_ai."
#: At most this many rejection reasons go into the partial-success message.
_MAX_MESSAGES = 5


class InvalidRequest(ValueError):
    """The request cannot be decoded at all: 400 / INVALID_ARGUMENT with this message."""


@dataclasses.dataclass(slots=True)
class Accepted:
    """A span that belongs to an envelope: its view and the facts the buffer needs."""

    view: SpanView
    context_id: str
    is_envelope: bool
    span_count: int | None


@dataclasses.dataclass(slots=True)
class Decoded:
    """What one request held."""

    spans: int = 0
    fast_path: int = 0
    unattributed: int = 0
    accepted: list[Accepted] = dataclasses.field(default_factory=list)
    rejected: int = 0
    messages: list[str] = dataclasses.field(default_factory=list)
    #: The request to make durable: the original bytes when every span in it is an
    #: accepted context span, a smaller request holding only those when it is mixed,
    #: None when there is nothing to keep.
    wal_payload: bytes | None = None

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.messages) < _MAX_MESSAGES:
            self.messages.append(message)

    def error_message(self) -> str:
        more = self.rejected - len(self.messages)
        text = "; ".join(self.messages)
        return f"{text}; and {more} more" if more > 0 else text


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidRequest(f"malformed ExportTraceServiceRequest protobuf: {exc}") from None
    return request


# -- OTLP/JSON ----------------------------------------------------------------------------------

_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(obj: dict[str, Any], where: str) -> None:
    for name in _ID_FIELDS:
        value = obj.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidRequest(f"{where}.{name}: expected a hex string, got {value!r}")
        try:
            obj[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            raise InvalidRequest(f"{where}.{name}: not a hex id: {value!r}") from None


def _items(obj: dict[str, Any], *names: str) -> list[Any]:
    for name in names:
        value = obj.get(name)
        if value is not None:
            if not isinstance(value, list):
                raise InvalidRequest(f"{name}: expected a list, got {type(value).__name__}")
            return value
    return []


def json_to_protobuf(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON (hex ids, lowerCamelCase, integer enums) -> the protobuf request."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidRequest("expected a JSON object (ExportTraceServiceRequest)")
    for r, rs in enumerate(_items(document, "resourceSpans", "resource_spans")):
        if not isinstance(rs, dict):
            raise InvalidRequest(f"resourceSpans[{r}]: expected an object")
        for s, ss in enumerate(_items(rs, "scopeSpans", "scope_spans")):
            if not isinstance(ss, dict):
                raise InvalidRequest(f"resourceSpans[{r}].scopeSpans[{s}]: expected an object")
            for i, span in enumerate(_items(ss, "spans")):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                if not isinstance(span, dict):
                    raise InvalidRequest(f"{where}: expected an object")
                _hex_ids_to_base64(span, where)
                for k, link in enumerate(_items(span, "links")):
                    if not isinstance(link, dict):
                        raise InvalidRequest(f"{where}.links[{k}]: expected an object")
                    _hex_ids_to_base64(link, f"{where}.links[{k}]")
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise InvalidRequest(f"not an OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return request


# -- attribute decoding -----------------------------------------------------------------------

_SCALARS = frozenset({STRING, INT, DOUBLE, "bool_value"})
_MISMATCH = object()

#: Interned names of every attribute the contract knows: buffered spans share the strings.
_INTERNED: dict[str, str] = {sys.intern(name): name for name in EXPECTED}


def _any_value(value: Any, kind: str) -> Any:
    if kind == "array_value":
        out = []
        for element in value.array_value.values:
            element_kind = element.WhichOneof("value")
            if element_kind is not None:
                out.append(_any_value(element, element_kind))
        return tuple(out)
    if kind == "kvlist_value":
        # Not an SDK attribute type; kept as JSON text so nothing is lost.
        return orjson.dumps(
            {kv.key: _any_value(kv.value, kv.value.WhichOneof("value") or "string_value")
             for kv in value.kvlist_value.values}
        ).decode()
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, kind)


_TYPE_WORDS = {
    STRING: "a string", INT: "an int", DOUBLE: "a double", "bool_value": "a bool",
    STRING_ARRAY: "a string array", "array_value": "an array", "kvlist_value": "a kvlist",
    "bytes_value": "bytes",
}


def _attributes(kvs: Iterable[Any], errors: list[str]) -> dict[str, Any]:
    """OTLP KeyValues -> a dict, checking contract attributes' types (errors appended)."""
    out: dict[str, Any] = {}
    interned = _INTERNED
    expected = EXPECTED
    for kv in kvs:
        key = kv.key
        value = kv.value
        kind = value.WhichOneof("value")
        if kind is None:
            continue
        key = interned.get(key, key)
        want = expected.get(key)
        if want is None and key.startswith(_CONTEXT_PREFIX):
            want = expected_type(key)
        if want is None or want == kind:
            out[key] = getattr(value, kind) if kind in _SCALARS else _any_value(value, kind)
            continue
        # Mismatch, or a string array (which arrives as array_value): check carefully.
        converted = _convert(value, kind, want)
        if converted is _MISMATCH:
            errors.append(f"attribute {key} must be {_TYPE_WORDS[want]}, got "
                          f"{_TYPE_WORDS.get(kind, kind)}")
            continue
        out[key] = converted
    return out




def _convert(value: Any, kind: str, want: str) -> Any:
    if want == STRING_ARRAY:
        if kind != "array_value":
            return _MISMATCH
        items = _any_value(value, kind)
        return items if all(isinstance(x, str) for x in items) else _MISMATCH
    if want == DOUBLE and kind == INT:
        return float(value.int_value)
    if want == INT and kind == DOUBLE:
        number = value.double_value
        return int(number) if number.is_integer() else _MISMATCH
    return _MISMATCH


def _view(span: Any, resource: dict[str, Any], errors: list[str]) -> SpanView:
    events = []
    required = REQUIRED_EVENT_ATTRIBUTES
    for event in span.events:
        name = event.name
        attributes = _attributes(event.attributes, errors)
        needs = required.get(name)
        if needs is not None and not any(attributes.get(key) for key in needs):
            errors.append(f"event {name} lacks {' or '.join(needs)}")
        events.append(EventView(name, event.time_unix_nano, attributes))
    parent = span.parent_span_id
    links = [(link.trace_id.hex(), link.span_id.hex()) for link in span.links]
    return SpanView(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        name=span.name,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        attributes=_attributes(span.attributes, errors),
        events=events,
        parent_span_id=parent.hex() if parent else None,
        dropped_attributes_count=span.dropped_attributes_count,
        dropped_events_count=span.dropped_events_count,
        links=links,
        status_code=span.status.code,
        resource=resource,
    )


def _has_context_keys(view: SpanView) -> bool:
    return any(key.startswith(_CONTEXT_PREFIX) for key in view.attributes)


def _describe(span: Any) -> str:
    return f"span {span.span_id.hex() or '<no id>'} {span.name!r}"


def decode_request(request: ExportTraceServiceRequest, body: bytes | None) -> Decoded:
    """Split a parsed request into fast-path, accepted and rejected spans.

    ``body`` is the request's protobuf encoding when the caller has it (gRPC, HTTP
    protobuf); it lets an all-fast-path request skip every span and an all-context request
    be made durable as it came.
    """
    out = Decoded()
    resource_spans = request.resource_spans
    if body is not None and not any(needle in body for needle in _NEEDLES):
        out.spans = out.fast_path = sum(
            len(ss.spans) for rs in resource_spans for ss in rs.scope_spans
        )
        return out
    keep: list[tuple[int, int, int]] = []  # (resource, scope, span) of accepted spans
    for r, rs in enumerate(resource_spans):
        resource: dict[str, Any] | None = None
        for s, ss in enumerate(rs.scope_spans):
            for i, span in enumerate(ss.spans):
                out.spans += 1
                if not span.name.startswith(_CONTEXT_PREFIX):
                    raw = span.SerializeToString()
                    if _NEEDLES[0] not in raw and _NEEDLES[1] not in raw:
                        out.fast_path += 1
                        continue
                if resource is None:
                    resource = _attributes(rs.resource.attributes, [])
                accepted = _accept(span, resource, out)
                if accepted is not None:
                    out.accepted.append(accepted)
                    keep.append((r, s, i))
    if out.accepted:
        out.wal_payload = (
            body if body is not None and len(keep) == out.spans
            else _subset(request, keep).SerializeToString()
        )
    return out


def _accept(span: Any, resource: dict[str, Any], out: Decoded) -> Accepted | None:
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id):
        out.reject(f"{_describe(span)}: trace id must be 16 bytes and span id 8 bytes")
        return None
    errors: list[str] = []
    view = _view(span, resource, errors)
    if errors:
        out.reject(f"{_describe(span)}: {errors[0]}")
        return None
    attributes = view.attributes
    context_id = attributes.get(S.CONTEXT_ID)
    if context_id is None:
        if _has_context_keys(view):
            out.reject(f"{_describe(span)}: has context.* attributes but no {S.CONTEXT_ID}")
        elif any(key.startswith(_GENAI_PREFIX) for key in attributes) or any(
            event.name.startswith(_CONTEXT_PREFIX) for event in view.events
        ):
            out.unattributed += 1
        else:
            out.fast_path += 1  # the prefix was in a value, not a name
        return None
    if not context_id:
        out.reject(f"{_describe(span)}: {S.CONTEXT_ID} is empty")
        return None
    is_envelope = S.CONTEXT_SCOPE in attributes
    span_count = attributes.get(S.CONTEXT_SPAN_COUNT) if is_envelope else None
    if span_count is not None and span_count < 0:
        out.reject(f"{_describe(span)}: {S.CONTEXT_SPAN_COUNT} must not be negative")
        return None
    return Accepted(view, context_id, is_envelope, span_count)


def _subset(request: ExportTraceServiceRequest,
            keep: list[tuple[int, int, int]]) -> ExportTraceServiceRequest:
    """A request with only the kept spans, under their own resource and scope."""
    subset = ExportTraceServiceRequest()
    current: tuple[int, int] | None = None
    target = None
    for r, s, i in keep:
        rs = request.resource_spans[r]
        if current is None or current[0] != r:
            new_rs = subset.resource_spans.add()
            new_rs.resource.CopyFrom(rs.resource)
            new_rs.schema_url = rs.schema_url
            current = (r, -1)
        if current[1] != s:
            ss = rs.scope_spans[s]
            target = new_rs.scope_spans.add()
            target.scope.CopyFrom(ss.scope)
            target.schema_url = ss.schema_url
            current = (r, s)
        assert target is not None
        target.spans.add().CopyFrom(rs.scope_spans[s].spans[i])
    return subset

