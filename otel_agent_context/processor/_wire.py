"""Cheap access to OTLP trace (and log) requests: "lite" message types and a KeyValue decoder.

Walking attributes through the generated OTLP classes costs about 0.75 µs per attribute
before any value is read: every ``KeyValue`` and ``AnyValue`` becomes a Python wrapper.
The lite types here have the OTLP field numbers but declare spans, attributes, resources
and scopes as plain ``bytes``, so upb hands out each span's encoding without building
anything (and a span can be tested for ``context.`` with one ``bytes`` search). An
attribute's bytes are then decoded by hand for the common shapes (a short key with one
string, int, double or bool) and by the generated ``KeyValue`` class otherwise.

Lite messages serialise to valid OTLP (same field numbers), so a subset of a request can
be re-encoded without copying spans through the full classes.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

__all__ = [
    "BOOL",
    "DOUBLE",
    "INT",
    "STRING",
    "LiteLogRecord",
    "LiteLogsRequest",
    "LiteRequest",
    "LiteResource",
    "LiteSpan",
    "LiteSpanProbe",
    "LiteSpansRequest",
    "LiteStatus",
    "LiteTooDeep",
    "any_value",
    "decode_key_value",
]

STRING = "string_value"
INT = "int_value"
DOUBLE = "double_value"
BOOL = "bool_value"

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "otel_agent_context.processor.lite"


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="otel_agent_context/processor/lite.proto", package=_PACKAGE, syntax="proto3")
    one, many = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

    def message(name: str, *fields: tuple[int, str, int, int, str | None],
                oneof: str | None = None, members: int = 0) -> None:
        """``oneof``: the last ``members`` fields are in a oneof of that name."""
        proto = file.message_type.add(name=name)
        if oneof:
            proto.oneof_decl.add(name=oneof)
        for index, (number, field_name, kind, label, type_name) in enumerate(fields):
            field = proto.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if oneof and index >= len(fields) - members:
                field.oneof_index = 0

    message("Request", (1, "resource_spans", _F.TYPE_MESSAGE, many, "ResourceSpans"))
    message("ResourceSpans", (1, "resource", _F.TYPE_BYTES, one, None),
            (2, "scope_spans", _F.TYPE_MESSAGE, many, "ScopeSpans"),
            (3, "schema_url", _F.TYPE_STRING, one, None))
    message("ScopeSpans", (1, "scope", _F.TYPE_BYTES, one, None),
            (2, "spans", _F.TYPE_BYTES, many, None),
            (3, "schema_url", _F.TYPE_STRING, one, None))
    # the same request with its spans as lite spans: one upb call parses every span of a
    # request most of whose spans are walked (the rest of it is skipped as unknown fields)
    message("SpansRequest", (1, "resource_spans", _F.TYPE_MESSAGE, many, "SpansResource"))
    message("SpansResource", (2, "scope_spans", _F.TYPE_MESSAGE, many, "SpansScope"))
    message("SpansScope", (2, "spans", _F.TYPE_MESSAGE, many, "SpanProbe"))
    message("Resource", (1, "attributes", _F.TYPE_BYTES, many, None))
    # what every span has; then those most spans lack
    common = ((1, "trace_id", _F.TYPE_BYTES, one, None),
              (2, "span_id", _F.TYPE_BYTES, one, None),
              (4, "parent_span_id", _F.TYPE_BYTES, one, None),
              (5, "name", _F.TYPE_STRING, one, None),
              (7, "start_time_unix_nano", _F.TYPE_FIXED64, one, None),
              (8, "end_time_unix_nano", _F.TYPE_FIXED64, one, None),
              (9, "attributes", _F.TYPE_BYTES, many, None))

    def rare(label: int, kind: int, event: str | None, link: str | None
             ) -> tuple[tuple[int, str, int, int, str | None], ...]:
        return ((10, "dropped_attributes_count", _F.TYPE_UINT32, one, None),
                (11, "events", kind, label, event),
                (12, "dropped_events_count", _F.TYPE_UINT32, one, None),
                (13, "links", kind, label, link),
                # bytes: most spans carry none, and reading a message field makes a wrapper
                (15, "status", _F.TYPE_BYTES, one, None))

    message("Span", *common, *rare(many, _F.TYPE_MESSAGE, "Event", "Link"))
    # A span's fields as Span's, but those most spans lack in one oneof (events and links
    # as single bytes, a probe only, not parsed): ``WhichOneof("rare")`` None, one read,
    # says that none is there, and the span is read from it alone; else it is parsed as a
    # Span.
    message("SpanProbe", *common, *rare(one, _F.TYPE_BYTES, None, None), oneof="rare",
            members=5)
    message("Event", (1, "time_unix_nano", _F.TYPE_FIXED64, one, None),
            (2, "name", _F.TYPE_STRING, one, None),
            (3, "attributes", _F.TYPE_BYTES, many, None))
    message("Link", (1, "trace_id", _F.TYPE_BYTES, one, None),
            (2, "span_id", _F.TYPE_BYTES, one, None))
    message("Status", (3, "code", _F.TYPE_INT32, one, None))  # an enum on the wire
    # a KeyValue whose OTLP/JSON value was nested too deep to keep (_decode.TOO_DEEP_FIELD)
    message("TooDeep", (100_000, "levels", _F.TYPE_UINT32, one, None))
    # ExportLogsServiceRequest: log records as bytes, and the few fields of one the
    # processor reads (log-based context events: the name, the ids, the times, attributes).
    message("LogsRequest", (1, "resource_logs", _F.TYPE_MESSAGE, many, "ResourceLogs"))
    message("ResourceLogs", (1, "resource", _F.TYPE_BYTES, one, None),
            (2, "scope_logs", _F.TYPE_MESSAGE, many, "ScopeLogs"),
            (3, "schema_url", _F.TYPE_STRING, one, None))
    message("ScopeLogs", (1, "scope", _F.TYPE_BYTES, one, None),
            (2, "log_records", _F.TYPE_BYTES, many, None),
            (3, "schema_url", _F.TYPE_STRING, one, None))
    message("LogRecord", (1, "time_unix_nano", _F.TYPE_FIXED64, one, None),
            (6, "attributes", _F.TYPE_BYTES, many, None),
            (9, "trace_id", _F.TYPE_BYTES, one, None),
            (10, "span_id", _F.TYPE_BYTES, one, None),
            (11, "observed_time_unix_nano", _F.TYPE_FIXED64, one, None),
            (12, "event_name", _F.TYPE_STRING, one, None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{_PACKAGE}.{name}")) for name in ("Request", "SpansRequest", "Resource", "Span", "Status",
                                            "LogsRequest", "LogRecord", "TooDeep",
                                            "SpanProbe")}


_CLASSES = _build()
LiteRequest: Any = _CLASSES["Request"]
LiteSpansRequest: Any = _CLASSES["SpansRequest"]
LiteResource: Any = _CLASSES["Resource"]
LiteSpan: Any = _CLASSES["Span"]
LiteStatus: Any = _CLASSES["Status"]
#: a span of ``LiteSpansRequest`` (the class its spans are)
LiteSpanProbe: Any = _CLASSES["SpanProbe"]
LiteLogsRequest: Any = _CLASSES["LogsRequest"]
LiteLogRecord: Any = _CLASSES["LogRecord"]
LiteTooDeep: Any = _CLASSES["TooDeep"]

_unpack_double = struct.Struct("<d").unpack_from
_SIGN = 1 << 63
_WRAP = 1 << 64
_MASK = _WRAP - 1


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            # A 10-byte varint carries up to 70 bits; protobuf (upb) keeps the low 64, and
            # so must this reader, or a value no int64 can hold gets through.
            return result & _MASK, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def any_value(value: Any, kind: str) -> Any:
    """A generated ``AnyValue`` (of oneof ``kind``) as a Python attribute value."""
    if kind == "array_value":
        # An element with no value (the SDK sends None in a sequence so) stays None: in the
        # folded form's parallel arrays a position counts, and the boundary says what it did.
        out = []
        for element in value.array_value.values:
            element_kind = element.WhichOneof("value")
            out.append(None if element_kind is None else any_value(element, element_kind))
        return tuple(out)
    if kind == "kvlist_value":
        import orjson  # kvlists are rare: not an SDK attribute type; kept as JSON text

        # encoded once, whole: a kvlist inside one as plain JSON, not as text escaped again
        # at every level (a few hundred bytes of nested kvlists were gigabytes of text)
        return orjson.dumps(_plain(value, kind)).decode()
    if kind == "bytes_value":
        import base64

        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, kind)


def _plain(value: Any, kind: str | None) -> Any:
    """An ``AnyValue`` as plain JSON-shaped Python (a kvlist a dict, an array a list)."""
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value, kv.value.WhichOneof("value") or STRING)
                for kv in value.kvlist_value.values}
    if kind == "array_value":
        return [None if (k := e.WhichOneof("value")) is None else _plain(e, k)
                for e in value.array_value.values]
    return any_value(value, kind) if kind is not None else None


_STRUCTURED = ("array_value", "kvlist_value")


def _general(buf: bytes, whole: frozenset[str]) -> tuple[str, Any, str | None]:
    kv = KeyValue.FromString(buf)
    kind = kv.value.WhichOneof("value")
    if kind is None:
        return kv.key, None, None
    if kind in _STRUCTURED and kv.key in whole:
        return kv.key, _plain(kv.value, kind), kind
    return kv.key, any_value(kv.value, kind), kind


def decode_key_value(buf: bytes, whole: frozenset[str] = frozenset()
                     ) -> tuple[str, Any, str | None]:
    """(key, value, oneof kind) of one encoded ``KeyValue``; kind None for an empty value.

    The hand-decoded shape: key (field 1, under 128 bytes), then the value (field 2, under
    128 bytes) holding exactly one string, int, double or bool. Anything else, including
    repeated or unknown fields, goes through the generated class, so protobuf's rules
    (last field wins, unknown fields skipped) hold either way. An array or kvlist of a key
    in ``whole`` comes whole as plain JSON-shaped Python (a kvlist a dict, an array a list).
    """
    try:
        if buf[0] == 0x0A:
            key_end = 2 + buf[1]
            if buf[1] < 0x80:
                key = buf[2:key_end].decode()
                size = len(buf)
                if key_end == size:
                    return key, None, None
                if buf[key_end] == 0x12 and buf[key_end + 1] < 0x80 and \
                        key_end + 2 + buf[key_end + 1] == size:
                    if buf[key_end + 1] == 0:
                        return key, None, None
                    tag = buf[key_end + 2]
                    if tag == 0x0A:
                        if buf[key_end + 3] < 0x80 and key_end + 4 + buf[key_end + 3] == size:
                            return key, buf[key_end + 4:size].decode(), STRING
                    elif tag == 0x18:
                        value, end = _varint(buf, key_end + 3)
                        if end == size:
                            return key, value - _WRAP if value >= _SIGN else value, INT
                    elif tag == 0x21:
                        if key_end + 11 == size:
                            return key, _unpack_double(buf, key_end + 3)[0], DOUBLE
                    elif tag == 0x10 and key_end + 4 == size:
                        return key, buf[key_end + 3] != 0, BOOL
    except (IndexError, UnicodeDecodeError):
        pass
    return _general(buf, whole)
