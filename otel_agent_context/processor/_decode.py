"""OTLP trace requests -> neutral span views, with the fast path and the checks at the door.

Cost decides the shape (see benchmarks/processor.md): parsing with upb is about 1 µs a
span, but walking 20 attributes through the generated classes about 15 µs. So:

* every request is parsed once by the generated classes, which validates all of it (a
  malformed request is refused whole, 400 / INVALID_ARGUMENT);
* a request whose bytes contain neither ``context.`` nor ``gen_ai.`` is all fast path:
  counted and never walked;
* otherwise the request is re-read through the lite types of ``_wire`` (each span's
  bytes, for free), a span is walked only if its own bytes contain one of the two
  prefixes, and its attributes are decoded by hand (``_wire.decode_key_value``);
* walked spans become :class:`~otel_agent_context.rebuild._view.SpanView` after the
  boundary (``rebuild._boundary``, the one the in-process rebuild uses too): a value it
  can repair is repaired, one it cannot is dropped alone (an attribute, an event), and each
  repair is listed in the bundle and told to the sender in the partial-success message;
* only a span that cannot join an envelope at all (undecodable, bad ids, ``context.*``
  attributes without a usable ``context.id``) is rejected, with a message;
* OTLP/JSON has no nesting limit, the protobuf parser that reads the WAL back has one
  (``PARSE_DEPTH``): the JSON reader counts message levels as it does, and drops an attribute
  nested deeper (a ``too_deep`` repair) rather than acknowledge what a restart cannot read.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from .. import _semconv as S
from .._table import ATTRIBUTES, FOLDED
from ..rebuild._boundary import (
    ANY_TYPED,
    DROP,
    PARALLEL_KEYS,
    PLAIN_INT,
    PLAIN_TEXT,
    TOO_DEEP,
    Repair,
    check_attribute,
    check_event,
    dropped_event,
    duplicate_keys,
    parallel_arrays,
    shown,
    span_times,
    undated_event,
)
from ..rebuild._completion import Accepted
from ..rebuild._view import EventView, SpanView
from ._memory import EVENT_COST, SPAN_OVERHEAD
from ._wire import (
    _SIGN,
    _WRAP,
    INT,
    STRING,
    LiteRequest,
    LiteResource,
    LiteSpan,
    LiteSpanProbe,
    LiteSpansRequest,
    LiteStatus,
    LiteTooDeep,
    _varint,
    decode_key_value,
)

__all__ = [
    "Accepted",
    "Decoded",
    "InvalidRequest",
    "decode_request",
    "decode_cache_bytes",
    "json_to_protobuf",
    "parse_protobuf",
    "set_decode_cache_bytes",
]

_NEEDLES = (b"context.", b"gen_ai.")
_CONTEXT_PREFIX = "context."
_GENAI_PREFIX = "gen_ai."
_ENVELOPE_MARK = S.CONTEXT_SCOPE
#: At most this many rejections, and as many repairs, are named in the partial-success message.
_MAX_MESSAGES = 5
_SERVICE_NAME = "service.name"
_ZERO_TRACE = bytes(16)


class InvalidRequest(ValueError):
    """The request cannot be decoded at all: 400 / INVALID_ARGUMENT with this message."""


@dataclasses.dataclass(slots=True)
class Decoded:
    """What one request held."""

    spans: int = 0
    fast_path: int = 0
    unattributed: int = 0
    accepted: list[Accepted] = dataclasses.field(default_factory=list)
    rejected: int = 0
    messages: list[str] = dataclasses.field(default_factory=list)
    #: what the boundary changed in the accepted spans
    repairs: list[Repair] = dataclasses.field(default_factory=list)
    #: (service.name, reason) -> count, for the operator's log: a repair kind or "rejected"
    problems: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    #: The request to make durable: the original bytes when every span in it is an
    #: accepted context span, a smaller request holding only those when it is mixed,
    #: None when there is nothing to keep.
    wal_payload: bytes | None = None

    def reject(self, message: str, service: str = "") -> None:
        self.rejected += 1
        key = (service, "rejected")
        self.problems[key] = self.problems.get(key, 0) + 1
        if len(self.messages) < _MAX_MESSAGES:
            self.messages.append(message)

    def repaired(self, repairs: list[Repair], service: str) -> None:
        self.repairs.extend(repairs)
        for repair in repairs:
            key = (service, repair.kind)
            self.problems[key] = self.problems.get(key, 0) + 1

    def error_message(self) -> str:
        """Rejections first, then repairs, each naming span, event and attribute."""
        parts = list(self.messages)
        more = self.rejected - len(self.messages)
        if more > 0:
            parts.append(f"and {more} more spans rejected")
        parts += [describe(r) for r in self.repairs[:_MAX_MESSAGES]]
        more = len(self.repairs) - _MAX_MESSAGES
        if more > 0:
            parts.append(f"and {more} more repairs")
        return "; ".join(parts)


def describe(repair: Repair) -> str:
    """A repair in words for the sender: span, event, attribute, value, what was done."""
    where = f"span {repair.span_id}"
    if repair.event:
        where += f" event {repair.event}"
    if repair.kind in ("event_dropped", "event_time"):
        return f"{where} event {repair.field}: {repair.action}"
    return f"{where} attribute {repair.field}={repair.received}: {repair.action}"


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


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


def load_json(body: bytes) -> Any:
    """The JSON document of an OTLP/JSON request. A lone surrogate escape (JSON.stringify
    writes one for a string cut inside a surrogate pair) is read as U+FFFD, as the
    Collector's OTLP receiver reads it, instead of costing the whole request."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in str(exc):
            raise InvalidRequest(f"malformed JSON: {exc}") from None
        first = exc
    try:
        return _without_surrogates(json.loads(body, parse_constant=_reject_constant))
    except (ValueError, RecursionError):
        raise InvalidRequest(f"malformed JSON: {first}") from None


def json_to_protobuf(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON (hex ids, lowerCamelCase, integer enums) -> the protobuf request."""
    document = load_json(body)
    if not isinstance(document, dict):
        raise InvalidRequest("expected a JSON object (ExportTraceServiceRequest)")
    fast = _fast_json_request(document)
    if fast is not None:
        return fast
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
    return parse_dict(document, ExportTraceServiceRequest())


def parse_dict(document: dict[str, Any], request: _Request) -> _Request:
    """``request`` filled in by json_format.ParseDict, as deep as the protobuf parser reads
    (the WAL is read back by it)."""
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True,
                              max_recursion_depth=PARSE_DEPTH + 1)
    except json_format.ParseError as exc:
        what = f"not an OTLP/JSON {type(request).__name__}"
        if "too deep" in str(exc):  # its message repeats a line per level
            raise InvalidRequest(f"{what}: a value is nested too deep (protobuf parsers read "
                                 f"{PARSE_DEPTH} message levels)") from None
        raise InvalidRequest(f"{what}: {exc}") from None
    return request


# The protobuf library's json_format.ParseDict walks every field by reflection: about 1.1 ms
# a span (28 ms for a request of 25 context spans, which capped an OTLP/JSON connection near
# 22 requests a second). The common shape, as OTLP/JSON exporters write it, is filled in
# directly below; anything else (snake_case or unknown names, enum names, NaN strings,
# bytes values, nulls, out-of-range numbers, bad ids) returns None and takes ParseDict, so
# the result, and every error, is what ParseDict gives.


class _Unusual(Exception):
    """Not the common shape: leave it to json_format.ParseDict."""


class _TooDeep(Exception):
    """A value nested deeper than the protobuf parser reads (``PARSE_DEPTH``)."""


def _parse_depth() -> int:
    """The deepest message level (the request's own fields at 1) the protobuf parser reads:
    the WAL is read back by it, so nothing deeper may be acknowledged. Probed, not assumed
    (upb reads 100)."""
    chain = (1, 2, 2, 9, 2)  # resource_spans, scope_spans, spans, attributes, value

    def varint(number: int) -> bytes:
        out = bytearray()
        while number > 0x7F:
            out.append(number & 0x7F | 0x80)
            number >>= 7
        return bytes(out) + bytes((number,))

    def nested(depth: int) -> bytes:
        fields = (chain + (5, 1) * depth)[:depth]  # then array_value, values, ...
        payload = b""
        for number in reversed(fields):
            payload = varint(number << 3 | 2) + varint(len(payload)) + payload
        return payload

    low, high = len(chain), 2_000  # orjson refuses JSON nested 1,024 deep anyway
    while low < high:
        middle = (low + high + 1) // 2
        try:
            ExportTraceServiceRequest.FromString(nested(middle))
        except (DecodeError, RecursionError):
            high = middle - 1
        else:
            low = middle
    return low


#: The deepest message level the protobuf parser (and so WAL replay) reads.
PARSE_DEPTH = _parse_depth()


def _levels(value: Any) -> int:
    """How many kvlist/array levels an OTLP/JSON value has (for the repair's text)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if not isinstance(item, dict):
            continue
        for name in ("kvlistValue", "kvlist_value", "arrayValue", "array_value"):
            inner = item.get(name)
            values = inner.get("values") if isinstance(inner, dict) else None
            if isinstance(inner, dict):
                deepest = max(deepest, level + 1)
            for element in values if isinstance(values, list) else ():
                if isinstance(element, dict) and name.startswith("kvlist"):
                    element = element.get("value")
                stack.append((element, level + 1))
    return deepest


_UINT64 = (1 << 64) - 1
_INT64 = 1 << 63
_UINT32 = (1 << 32) - 1
_INT32 = 1 << 31


def _int(value: Any, low: int, high: int) -> int:
    if type(value) is str and value.lstrip("-").isdigit() and value.isascii():
        value = int(value)
    if type(value) is not int or not low <= value <= high:
        raise _Unusual
    return value


def _str(value: Any) -> str:
    if type(value) is not str:
        raise _Unusual
    return value


def _id(value: Any) -> bytes:
    try:
        return bytes.fromhex(_str(value))
    except ValueError:
        raise _Unusual from None


def _fill_any_value(value: dict[str, Any], out: Any, depth: int) -> None:
    """``out``, an AnyValue at message level ``depth`` (checked by the caller), from
    ``value``."""
    if type(value) is not dict or len(value) > 1:
        raise _Unusual
    out.SetInParent()  # as ParseDict: an empty {} is a value present and empty
    for kind, item in value.items():
        if kind == "stringValue":
            out.string_value = _str(item)
        elif kind == "intValue":
            out.int_value = _int(item, -_INT64, _INT64 - 1)
        elif kind == "boolValue":
            if type(item) is not bool:
                raise _Unusual
            out.bool_value = item
        elif kind == "doubleValue":
            if type(item) is int:
                item = float(item)
            if type(item) is not float:
                raise _Unusual
            out.double_value = item
        elif kind == "arrayValue":
            if depth >= PARSE_DEPTH:
                raise _TooDeep
            array = out.array_value
            array.SetInParent()
            elements = _list(_keys(item, _VALUES).get("values"))
            if elements and depth + 2 > PARSE_DEPTH:
                raise _TooDeep
            for element in elements:
                _fill_any_value(element, array.values.add(), depth + 2)
        elif kind == "kvlistValue":
            if depth >= PARSE_DEPTH:
                raise _TooDeep
            kvlist = out.kvlist_value
            kvlist.SetInParent()
            _fill_attributes(_keys(item, _VALUES).get("values"), kvlist.values, depth + 2)
        else:
            raise _Unusual


def _fill_attributes(attributes: Any, out: Any, depth: int, marks: bool = False) -> None:
    """KeyValues at message level ``depth``. With ``marks`` (the attributes of a span, an
    event, a log record: those the boundary reads), one nested too deep is kept as its key
    and a mark (``_wire.LiteTooDeep``: a field OTLP does not have, with how many levels it
    had), which decoding makes a ``too_deep`` repair, now and when the WAL is read back (the
    value itself could not be); elsewhere the request takes ParseDict, which refuses it."""
    attributes = _list(attributes)
    # a KeyValue at the limit may be there, not its value (checked here once, not each value)
    if depth >= PARSE_DEPTH and attributes and (depth > PARSE_DEPTH or any(
            type(a) is dict and "value" in a for a in attributes)):
        raise _TooDeep
    for attribute in attributes:
        kv = out.add()
        fields = _keys(attribute, _KEY_VALUE)
        if "key" in fields:
            kv.key = _str(fields["key"])
        if "value" in fields:
            try:
                _fill_any_value(fields["value"], kv.value, depth + 1)
            except _TooDeep:
                if not marks:
                    raise
                kv.ClearField("value")
                kv.MergeFromString(LiteTooDeep(levels=_levels(fields["value"]) or 1)
                                   .SerializeToString())


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise _Unusual
    return value


def _keys(obj: Any, known: frozenset[str]) -> dict[str, Any]:
    if type(obj) is not dict or not known.issuperset(obj) or None in obj.values():
        raise _Unusual
    return obj


_VALUES = frozenset({"values"})
_KEY_VALUE = frozenset({"key", "value"})
_REQUEST = frozenset({"resourceSpans"})
_RESOURCE_SPANS = frozenset({"resource", "scopeSpans", "schemaUrl"})
_RESOURCE = frozenset({"attributes", "droppedAttributesCount"})
_SCOPE_SPANS = frozenset({"scope", "spans", "schemaUrl"})
_SCOPE = frozenset({"name", "version", "attributes", "droppedAttributesCount"})
_SPAN = frozenset({"traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind",
                   "startTimeUnixNano", "endTimeUnixNano", "attributes",
                   "droppedAttributesCount", "events", "droppedEventsCount", "links",
                   "droppedLinksCount", "status"})
_EVENT = frozenset({"timeUnixNano", "name", "attributes", "droppedAttributesCount"})
_LINK = frozenset({"traceId", "spanId", "traceState", "attributes", "droppedAttributesCount",
                   "flags"})
_STATUS = frozenset({"message", "code"})
# The logs request shares the tables: each message's names are checked against its own set
# (``_keys``), so a name of one signal never reaches a message of the other.
_LOGS_REQUEST = frozenset({"resourceLogs"})
_RESOURCE_LOGS = frozenset({"resource", "scopeLogs", "schemaUrl"})
_SCOPE_LOGS = frozenset({"scope", "logRecords", "schemaUrl"})
_LOG_RECORD = frozenset({"timeUnixNano", "observedTimeUnixNano", "severityNumber",
                         "severityText", "body", "attributes", "droppedAttributesCount",
                         "flags", "traceId", "spanId", "eventName"})


def _u64(value: Any) -> int:
    return _int(value, 0, _UINT64)


def _u32(value: Any) -> int:
    return _int(value, 0, _UINT32)


def _fill(fields: dict[str, Any], out: Any, depth: int = 0, marks: bool = False) -> None:
    """A message at message level ``depth`` (the request 0) from its JSON object (names
    checked by the caller): lists of messages, messages, attributes and scalar fields.
    ``marks``: the message is a span, an event or a log record (see ``_fill_attributes``)."""
    for name, value in fields.items():
        if name == "attributes":
            _fill_attributes(value, out.attributes, depth + 1, marks)
        elif name == "body":
            _fill_any_value(value, out.body, depth + 1)
        elif name in _LISTS:
            field, known = _LISTS[name]
            add = getattr(out, field).add
            walked = known in _WALKED
            for item in _list(value):
                _fill(_keys(item, known), add(), depth + 1, walked)
        elif name in _MESSAGES:
            known = _MESSAGES[name]
            message = getattr(out, name)
            message.SetInParent()
            _fill(_keys(value, known), message, depth + 1)
        else:
            field, convert = _SCALARS[name]
            setattr(out, field, convert(value))


def _enum(value: Any, names: dict[str, int]) -> int:
    """An enum as a number or by its name (proto3 enums are open: any int32 is kept)."""
    if type(value) is str and value in names:
        return names[value]
    return _int(value, -_INT32, _INT32 - 1)


_KINDS = dict(Span.SpanKind.items())
_CODES = dict(Status.StatusCode.items())
_SEVERITIES = dict(SeverityNumber.items())
#: JSON name -> (field, the names its items may have)
_LISTS = {"resourceSpans": ("resource_spans", _RESOURCE_SPANS),
          "scopeSpans": ("scope_spans", _SCOPE_SPANS), "spans": ("spans", _SPAN),
          "events": ("events", _EVENT), "links": ("links", _LINK),
          "resourceLogs": ("resource_logs", _RESOURCE_LOGS),
          "scopeLogs": ("scope_logs", _SCOPE_LOGS), "logRecords": ("log_records", _LOG_RECORD)}
#: the messages whose attributes the boundary reads (an over-deep one there is a repair)
_WALKED = (_SPAN, _EVENT, _LOG_RECORD)
#: JSON name (the field's too) -> the names the message may have
_MESSAGES = {"resource": _RESOURCE, "scope": _SCOPE, "status": _STATUS}
#: JSON name -> (field, conversion) of the scalar fields
_SCALARS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "traceId": ("trace_id", _id), "spanId": ("span_id", _id),
    "parentSpanId": ("parent_span_id", _id), "name": ("name", _str),
    "traceState": ("trace_state", _str), "version": ("version", _str),
    "schemaUrl": ("schema_url", _str), "message": ("message", _str),
    "flags": ("flags", _u32),
    "kind": ("kind", lambda value: _enum(value, _KINDS)),
    "code": ("code", lambda value: _enum(value, _CODES)),
    "severityNumber": ("severity_number", lambda value: _enum(value, _SEVERITIES)),
    "severityText": ("severity_text", _str), "eventName": ("event_name", _str),
    "observedTimeUnixNano": ("observed_time_unix_nano", _u64),
    "startTimeUnixNano": ("start_time_unix_nano", _u64),
    "endTimeUnixNano": ("end_time_unix_nano", _u64),
    "timeUnixNano": ("time_unix_nano", _u64),
    "droppedAttributesCount": ("dropped_attributes_count", _u32),
    "droppedEventsCount": ("dropped_events_count", _u32),
    "droppedLinksCount": ("dropped_links_count", _u32),
}


_Request = TypeVar("_Request", ExportTraceServiceRequest, ExportLogsServiceRequest)


def fast_json(document: dict[str, Any], request: _Request) -> _Request | None:
    """``request`` (an empty trace or logs request) filled in directly from a document of
    the common shape; None otherwise (json_format.ParseDict then decides)."""
    logs = isinstance(request, ExportLogsServiceRequest)
    try:
        _fill(_keys(document, _LOGS_REQUEST if logs else _REQUEST), request)
    except (_Unusual, _TooDeep, TypeError, ValueError):
        return None
    return request


def _fast_json_request(document: dict[str, Any]) -> ExportTraceServiceRequest | None:
    return fast_json(document, ExportTraceServiceRequest())


# -- attribute decoding -----------------------------------------------------------------------

#: Encoded KeyValue -> what it is after the boundary. Agents repeat most attribute encodings
#: byte for byte (kinds, reasons, targets, agent names, the envelope's context.id), so a hit
#: skips decoding and checking and shares the value objects; bounded, cleared when full. An
#: entry is ``(key, value)`` for an attribute kept as it came (a list of those alone is the
#: attributes' dict, one C call) and not an array of the folded form, else ``(key or None,
#: value, (kind, action, shown) or None)``: key None when the attribute is empty or dropped.
#: (``_Decoded``, made below: ``_DECODED[buf]`` decodes a miss)
_MAX_DECODED = 65_536
#: Only short encodings are cached (ids, kinds, reasons, names repeat; a 40 MiB document
#: does not, and caching it would hold it after its request is written).
_MAX_CACHED_BYTES = 512
#: What an entry costs beyond twice its encoding (the key bytes and the decoded value):
#: the dict slot, the tuple, the objects (measured with tracemalloc: about 2 x len + 200).
_ENTRY_OVERHEAD = 224
#: [bytes the cache holds (estimated), its cap]; the cap is ``memory.max_bytes``'s
#: decode_cache share, set by the pipeline (the cache is shared by the process).
_CACHE_BYTES = [0, 64 * 1024 * 1024]


def set_decode_cache_bytes(cap: int) -> None:
    """Bound the decode cache to about ``cap`` bytes (emptied when it would pass it)."""
    _CACHE_BYTES[1] = cap
    if _CACHE_BYTES[0] > cap:
        _DECODED.clear()
        _CACHE_BYTES[0] = 0


def decode_cache_bytes() -> int:
    """Bytes the decode cache holds (an estimate)."""
    return _CACHE_BYTES[0]
_INTERNED = {name: name for name in ATTRIBUTES}
_OPAQUE = ("kvlist_value", "bytes_value")


def _decode_checked(buf: bytes) -> tuple[str | None, Any, tuple[str, str, str] | None]:
    key, value, kind = decode_key_value(buf, ANY_TYPED)
    if kind is None:
        levels = LiteTooDeep.FromString(buf).levels
        if levels:  # the value was nested deeper than the protobuf parser reads
            return None, None, (TOO_DEEP, f"nested deeper than OTLP protobuf parsers read "
                                f"({PARSE_DEPTH} message levels in a request): dropped",
                                f"<a value nested {levels} kvlist/array levels>")
        return None, None, None
    key = _INTERNED.get(key, key)
    if kind == STRING:
        if value and key in PLAIN_TEXT:  # an id seen for the first time
            return key, value, None
    elif kind == INT:
        low = PLAIN_INT.get(key)
        if low is not None and value >= low:  # a count seen for the first time
            return key, value, None
    received = value
    if kind == "array_value" and key not in ANY_TYPED:
        kind = _array_kind(buf)
        if kind != "array_value" and key in FOLDED:
            # a parallel array keeps its positions: the opaque element alone has no value
            elements = KeyValue.FromString(buf).value.array_value.values
            value = tuple(None if element.WhichOneof("value") in _OPAQUE else v
                          for element, v in zip(elements, value, strict=True))
            kind = "array_value"
    checked, repair = check_attribute(key, value, kind)
    noted = None if repair is None else (repair[0], repair[1], shown(key, received))
    return (None if checked is DROP else key), checked, noted


def _array_kind(buf: bytes) -> str:
    """``array_value``, or the kind of an element no contract type holds (a kvlist or bytes
    element, which ``any_value`` made text) so that the boundary drops the array as it would
    that value alone."""
    for element in KeyValue.FromString(buf).value.array_value.values:
        kind = element.WhichOneof("value")
        if kind in _OPAQUE:
            return kind  # type: ignore[no-any-return]
    return "array_value"


def _head(key: str) -> bytes:
    """A KeyValue's encoding up to its value's length: the key (field 1), field 2's tag."""
    encoded = key.encode()
    return b"\x0a" + bytes((len(encoded),)) + encoded + b"\x12"


#: The encoded head (``_head``) of an attribute whose new values need no check: a plain
#: text one (``PLAIN_TEXT``, any non-empty text kept) -> (key, None), a plain int one
#: (``PLAIN_INT``) -> (key, the lowest value kept). New ids and counts, most cache misses,
#: are read from these without the general decoder.
_PLAIN_HEADS: dict[bytes, tuple[str, float | None]] = {
    **{_head(key): (_INTERNED[key], None) for key in PLAIN_TEXT
       if key not in PARALLEL_KEYS and len(key.encode()) < 0x80},
    **{_head(key): (_INTERNED[key], low) for key, low in PLAIN_INT.items()
       if key not in PARALLEL_KEYS and len(key.encode()) < 0x80}}


def _plain(buf: bytes) -> tuple[str, Any] | None:
    """The clean cache entry of a plain attribute's new value (see ``_PLAIN_HEADS``) in
    the common encoding (one string or int, lengths under 128 bytes), else None: what
    ``_decode_checked`` makes of it, without its general steps."""
    try:
        end = buf[1] + 3
        found = _PLAIN_HEADS.get(buf[:end])
        if found is None:
            return None
        size = len(buf)
        length = buf[end]  # the value's, to the end of ``buf``
        if length >= 0x80 or length + end + 1 != size:
            return None
        key, low = found
        tag = buf[end + 1]
        if low is None:
            length = buf[end + 2]  # the text's, to the end, not empty
            if tag == 0x0A and 0 < length < 0x80 and length + end + 3 == size:
                return key, buf[end + 3:].decode()
        elif tag == 0x18:
            value, stop = _varint(buf, end + 2)
            if stop == size:
                if value >= _SIGN:
                    value -= _WRAP
                if value >= low:
                    return key, value
    except (IndexError, UnicodeDecodeError):
        pass
    return None


def _cache(buf: bytes) -> tuple[Any, ...]:
    """``buf`` decoded and checked, and remembered if short (the clean form when it is)."""
    entry: tuple[Any, ...] | None = _plain(buf)
    if entry is None:
        key, value, noted = _decode_checked(buf)
        entry = ((key, value) if noted is None and key is not None
                 and key not in PARALLEL_KEYS else (key, value, noted))
    size = len(buf)
    if size <= _MAX_CACHED_BYTES:
        held = _CACHE_BYTES
        total = held[0] + 2 * size + _ENTRY_OVERHEAD
        if total > held[1] or len(_DECODED) >= _MAX_DECODED:
            _DECODED.clear()
            total = 2 * size + _ENTRY_OVERHEAD
        _DECODED[buf] = entry
        held[0] = total
    return entry


class _Decoded(dict[bytes, tuple[Any, ...]]):
    """``cache[buf]`` is the entry of ``buf``, made by ``_cache`` on a miss: a hit stays in
    C, and a miss is found without a pass over the entries."""

    __missing__ = staticmethod(_cache)


_DECODED = _Decoded()
#: its lookup, bound once (the cache is cleared, never replaced)
_LOOKUP = _DECODED.__getitem__


#: Up to this many attributes, a plain loop; beyond, one list of cache entries made a dict
#: by one C call (cheaper per attribute, dearer to set up).
_FEW = 8


def _checked(encoded: Sequence[bytes], repairs: list[Repair] | None, span_id: str,
             event: str) -> tuple[dict[str, Any], bool]:
    """The attributes' dict, through the boundary (repairs appended), and whether every one
    was clean and none repeated: nothing said and nothing of the folded form (whose arrays
    ``parallel_arrays`` lines up), the common case. Each attribute is decoded once."""
    rest: Iterable[tuple[bytes, tuple[Any, ...] | None]]
    if len(encoded) > _FEW:
        # a slice is one C call making every element (iterating a upb container asks for
        # them one by one); a miss is decoded by the cache's __missing__
        encoded = encoded[:]
        entries = list(map(_LOOKUP, encoded))
        out: dict[str, Any]
        try:
            out = dict(entries)  # type: ignore[arg-type]
        except ValueError:  # an entry of three: dropped, repaired or of the folded form
            out, rest = {}, zip(encoded, entries, strict=True)
        else:
            if len(out) == len(entries):
                return out, True
            out, rest = {}, zip(encoded, entries, strict=True)  # a key repeated
    else:
        out = {}
        remaining = iter(encoded[:])  # a upb container iterated ends in an IndexError
        cache = _DECODED
        for buf in remaining:
            found = cache[buf]
            try:
                key, value = found
            except ValueError:  # an entry of three: the rest from it on, below
                rest = itertools.chain(((buf, found),), ((b, None) for b in remaining))
                break
            out[key] = value
        else:
            if len(out) == len(encoded):
                return out, True
            rest = ()  # every entry clean, a key repeated: said below
    dropped_names: set[str] | None = None
    for buf, entry in rest:
        if entry is None:
            entry = _DECODED[buf]
        if len(entry) == 2:
            out[entry[0]] = entry[1]
            continue
        key, value, noted = entry
        if key is not None:
            out[key] = value
        else:
            key_name = decode_key_value(buf)[0]
            out.pop(key_name, None)  # a repeated key: its last occurrence decides
            if dropped_names is None:
                dropped_names = set()
            dropped_names.add(key_name)
            if noted is not None and repairs is not None:
                repairs.append(Repair(noted[0], key_name, noted[2], noted[1], span_id, event))
        if noted is not None and key is not None and repairs is not None:
            repairs.append(Repair(noted[0], key, noted[2], noted[1], span_id, event))
    # OTLP keys are unique: fewer names than entries is a repeat (whichever came first)
    if repairs is not None and (
            len(out) < len(encoded) if dropped_names is None
            else len(out.keys() | dropped_names) < len(encoded)):
        repairs.extend(duplicate_keys([decode_key_value(buf)[0] for buf in encoded], span_id,
                                      event))
    return out, False


def _attributes(encoded: Sequence[bytes], repairs: list[Repair] | None, span_id: str = "",
                event: str = "") -> dict[str, Any]:
    """Encoded OTLP KeyValues -> a dict, through the boundary (repairs appended)."""
    return _checked(encoded, repairs, span_id, event)[0]


def _view(span: Any, resource: dict[str, Any], trace_id: bytes, span_id_bytes: bytes,
          rare: bool = True) -> SpanView:
    """``rare``: read the fields most spans lack (False: ``span`` is a ``SpanProbe`` that
    has none of them)."""
    # Each field of a lite span is read once: every read of a upb field costs a call.
    span_id = span_id_bytes.hex()
    repairs: list[Repair] = []
    raw_events = span.events if rare else ()
    start = span.start_time_unix_nano
    end = span.end_time_unix_nano
    if not start or end < start:
        start, end = span_times(start, end, (e.time_unix_nano for e in raw_events), span_id,
                                repairs)
    # the span's attributes first, then its events: the order normalize_view repairs in
    span_attributes: Mapping[str, Any]
    span_attributes, clean = _checked(span.attributes, repairs, span_id, "")
    if not clean:  # clean: nothing of the folded form to line up
        span_attributes = parallel_arrays(span_attributes, repairs, span_id)
    events = []
    # guarded and sliced: iterating a upb container ends in an IndexError, even when empty
    for event in raw_events[:] if raw_events else ():
        name = event.name
        attributes = _checked(event.attributes, repairs, span_id, name)[0]
        lacking = check_event(name, attributes)
        if lacking is not None:
            repairs.append(dropped_event(name, lacking, span_id))
            continue
        time = event.time_unix_nano
        if not time:
            repairs.append(undated_event(name, span_id))
            time = start
        events.append(EventView(name, time, attributes))
    parent = span.parent_span_id
    if not rare:
        # positional: the order of SpanView's fields
        return SpanView(trace_id.hex(), span_id, span.name, start, end, span_attributes,
                        events, parent.hex() if parent else None, 0, 0, [], 0, resource,
                        repairs, True)
    links = span.links
    status = span.status
    return SpanView(
        trace_id.hex(), span_id, span.name, start, end, span_attributes, events,
        parent.hex() if parent else None, span.dropped_attributes_count,
        span.dropped_events_count,
        [(link.trace_id.hex(), link.span_id.hex()) for link in links] if links else [],
        LiteStatus.FromString(status).code if status else 0, resource, repairs, True)


def _describe(span: Any) -> str:
    return f"span {span.span_id.hex() or '<no id>'} {span.name!r}"


def decode_request(body: bytes, request: ExportTraceServiceRequest | None = None) -> Decoded:
    """Split a request (its protobuf encoding) into fast-path, accepted and rejected spans.

    ``request`` is the same request parsed by the generated classes, if the caller has it
    (which validated the whole encoding); it only serves to count an all-fast-path request.
    """
    out = Decoded()
    if not any(needle in body for needle in _NEEDLES):
        if request is None:
            request = parse_protobuf(body)
        out.spans = out.fast_path = sum(
            len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
        )
        return out
    try:
        lite = LiteRequest.FromString(body)
    except DecodeError as exc:
        raise InvalidRequest(f"malformed ExportTraceServiceRequest protobuf: {exc}") from None
    context, genai = _NEEDLES
    resources = lite.resource_spans[:]
    # (resource, scope, its spans' bytes, the indexes of those walked)
    scopes: list[tuple[int, int, list[bytes], list[int]]] = []
    walked = 0
    for r, rs in enumerate(resources):
        for s, ss in enumerate(rs.scope_spans):
            spans = ss.spans[:]  # one C call (iterating the container ends in an IndexError)
            out.spans += len(spans)
            # find, not ``in``: bytes ``in`` tries the needle as an int first and formats a
            # TypeError each time (~1.9K instructions a span)
            indexes = [i for i, raw in enumerate(spans)
                       if raw.find(context) != -1 or raw.find(genai) != -1]
            if indexes:
                scopes.append((r, s, spans, indexes))
                walked += len(indexes)
    out.fast_path = out.spans - walked
    # most spans walked: all parsed by one upb call (cheaper than one call a span)
    parsed = _parsed(body) if 3 * walked >= 2 * out.spans else None
    keep: list[tuple[int, int, int]] = []  # (resource, scope, span) of accepted spans
    accepted_spans = out.accepted
    resource: dict[str, Any] = {}
    service = ""
    current = -1
    for r, s, spans, indexes in scopes:
        if current != r:
            current = r
            resource = _attributes(LiteResource.FromString(resources[r].resource).attributes,
                                   None)
            service = str(resource.get(_SERVICE_NAME, ""))
        lite_spans = _scope_spans(parsed, r, s, len(spans))
        for i in indexes:
            accepted = _accept(spans[i], resource, service, out,
                               None if lite_spans is None else lite_spans[i])
            if accepted is not None:
                accepted_spans.append(accepted)
                keep.append((r, s, i))
    if out.accepted:
        out.wal_payload = body if len(keep) == out.spans else subset(lite, keep, LiteRequest())
    return out


def _parsed(body: bytes) -> Any:
    """The request with its spans as lite spans, or None if they cannot be read so (each
    span is then parsed, and refused, alone)."""
    try:
        return LiteSpansRequest.FromString(body)
    except DecodeError:
        return None


def _scope_spans(parsed: Any, r: int, s: int, count: int) -> list[Any] | None:
    """The lite spans of scope ``s`` of resource ``r`` of ``parsed``, if they line up with
    the ``count`` spans read as bytes."""
    if parsed is None:
        return None
    try:
        spans: list[Any] = parsed.resource_spans[r].scope_spans[s].spans[:]
    except IndexError:
        return None
    return spans if len(spans) == count else None


#: ``span.WhichOneof`` called unbound: a method read from a upb message is first looked up
#: among its fields (~0.5K instructions a span)
_which_oneof = LiteSpanProbe.WhichOneof


def _accept(raw: bytes, resource: dict[str, Any], service: str, out: Decoded,
            span: Any = None) -> Accepted | None:
    """``raw`` as an envelope's span (``span``: it parsed as a ``SpanProbe`` already), or
    None (rejected, or counted as not one)."""
    rare = span is None or _which_oneof(span, "rare") is not None
    if rare:
        try:
            span = LiteSpan.FromString(raw)
        except DecodeError as exc:
            out.reject(f"a span cannot be decoded: {exc}", service)
            return None
    trace_id = span.trace_id
    span_id = span.span_id
    if len(trace_id) != 16 or len(span_id) != 8 or trace_id == _ZERO_TRACE:
        out.reject(f"{_describe(span)}: trace id must be 16 bytes and span id 8 bytes",
                   service)
        return None
    try:
        view = _view(span, resource, trace_id, span_id, rare)
    except DecodeError as exc:
        out.reject(f"{_describe(span)}: an attribute cannot be decoded: {exc}", service)
        return None
    attributes = view.attributes
    context_id = attributes.get(S.CONTEXT_ID)
    if context_id is None:
        if any(key.startswith(_CONTEXT_PREFIX) for key in attributes):
            why = next((r.action for r in view.repairs if r.field == S.CONTEXT_ID),
                       f"no {S.CONTEXT_ID}")
            out.reject(f"{_describe(span)}: has context.* attributes but {S.CONTEXT_ID} "
                       f"is unusable ({why})", service)
        elif any(key.startswith(_GENAI_PREFIX) for key in attributes) or any(
            event.name.startswith(_CONTEXT_PREFIX) for event in view.events
        ):
            out.unattributed += 1
        else:
            out.fast_path += 1  # the prefix was in a value, not a name
        return None
    if not context_id:
        out.reject(f"{_describe(span)}: {S.CONTEXT_ID} is empty", service)
        return None
    size = len(raw) + SPAN_OVERHEAD + EVENT_COST * len(view.events)
    # context_id is a string: the boundary made it one (no assert: a test every span)
    accepted: Accepted | None
    if _ENVELOPE_MARK in attributes:
        accepted = Accepted.of(view, size)  # an envelope span: its counts read there
        assert accepted is not None
    else:  # what Accepted.of makes of a stage span, without its reads
        accepted = Accepted(view, context_id, False, None, None, size)
    if view.repairs:
        out.repaired(view.repairs, service)
    return accepted


def subset(lite: Any, keep: list[tuple[int, int, int]], empty: Any,
           kinds: tuple[str, str, str] = ("resource_spans", "scope_spans", "spans")) -> bytes:
    """The encoding of a request holding only the kept items (``(resource, scope, item)``
    indexes), under their resource and scope: ``empty`` is a new request of the lite type and
    ``kinds`` its three repeated fields (spans, or logs). Lite messages encode as OTLP:
    nothing is decoded to copy an item."""
    resources_field, scopes_field, items_field = kinds
    current: tuple[int, int] | None = None
    target = new_resource = None
    for r, s, i in keep:
        resource = getattr(lite, resources_field)[r]
        if current is None or current[0] != r:
            new_resource = getattr(empty, resources_field).add(
                resource=resource.resource, schema_url=resource.schema_url)
            current = (r, -1)
        if current[1] != s:
            scope = getattr(resource, scopes_field)[s]
            assert new_resource is not None
            target = getattr(new_resource, scopes_field).add(scope=scope.scope,
                                                             schema_url=scope.schema_url)
            current = (r, s)
        assert target is not None
        getattr(target, items_field).append(getattr(getattr(resource, scopes_field)[s],
                                                    items_field)[i])
    return bytes(empty.SerializeToString())
