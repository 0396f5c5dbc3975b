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
  attributes without a usable ``context.id``) is rejected, with a message.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from .. import _semconv as S
from .._table import ATTRIBUTES
from ..rebuild._boundary import (
    DROP,
    Repair,
    check_attribute,
    check_event,
    dropped_event,
    duplicate_keys,
    parallel_arrays,
    span_times,
    undated_event,
)
from ..rebuild._completion import Accepted
from ..rebuild._view import EventView, SpanView
from ._memory import EVENT_COST, SPAN_OVERHEAD
from ._wire import LiteRequest, LiteResource, LiteSpan, decode_key_value

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
#: At most this many rejections, and as many repairs, are named in the partial-success message.
_MAX_MESSAGES = 5
_SERVICE_NAME = "service.name"


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

#: Encoded KeyValue -> what it is after the boundary: (key, value, (kind, action, shown) or
#: None); key None when the attribute is empty or dropped. Agents repeat most attribute
#: encodings byte for byte (kinds, reasons, targets, agent names), so a hit skips decoding
#: and checking and shares the value objects; bounded, cleared when full.
_DECODED: dict[bytes, tuple[str | None, Any, tuple[str, str, str] | None]] = {}
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
    key, value, kind = decode_key_value(buf)
    if kind is None:
        return None, None, None
    key = _INTERNED.get(key, key)
    if kind == "array_value":
        kind = _array_kind(buf)
    checked, repair = check_attribute(key, value, kind)
    noted = None if repair is None else (repair[0], repair[1], _shown(value))
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


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:120] + "…"


def _attributes(encoded: Sequence[bytes], repairs: list[Repair] | None, span_id: str = "",
                event: str = "") -> dict[str, Any]:
    """Encoded OTLP KeyValues -> a dict, through the boundary (repairs appended)."""
    out: dict[str, Any] = {}
    cache = _DECODED
    dropped_names: set[str] | None = None
    for buf in encoded:
        decoded = cache.get(buf)
        if decoded is None:
            decoded = _decode_checked(buf)
            if len(buf) <= _MAX_CACHED_BYTES:
                cost = 2 * len(buf) + _ENTRY_OVERHEAD
                held = _CACHE_BYTES
                if len(cache) >= _MAX_DECODED or held[0] + cost > held[1]:
                    cache.clear()
                    held[0] = 0
                cache[buf] = decoded
                held[0] += cost
        key, value, noted = decoded
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
    return out


def _view(span: Any, resource: dict[str, Any]) -> SpanView:
    # Each field of a lite span is read once: every read of a upb field costs a call.
    span_id = span.span_id.hex()
    repairs: list[Repair] = []
    raw_events = span.events
    start = span.start_time_unix_nano
    end = span.end_time_unix_nano
    if not start or end < start:
        start, end = span_times(start, end, (e.time_unix_nano for e in raw_events), span_id,
                                repairs)
    # the span's attributes first, then its events: the order normalize_view repairs in
    span_attributes = parallel_arrays(_attributes(span.attributes, repairs, span_id), repairs,
                                      span_id)
    events = []
    for event in raw_events:
        name = event.name
        attributes = _attributes(event.attributes, repairs, span_id, name)
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
    links = span.links
    # positional: the order of SpanView's fields
    return SpanView(
        span.trace_id.hex(), span_id, span.name, start, end, span_attributes, events,
        parent.hex() if parent else None, span.dropped_attributes_count,
        span.dropped_events_count,
        [(link.trace_id.hex(), link.span_id.hex()) for link in links] if links else [],
        span.status.code, resource, repairs, True)


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
    keep: list[tuple[int, int, int]] = []  # (resource, scope, span) of accepted spans
    for r, rs in enumerate(lite.resource_spans):
        resource: dict[str, Any] | None = None
        for s, ss in enumerate(rs.scope_spans):
            for i, raw in enumerate(ss.spans):
                out.spans += 1
                if context not in raw and genai not in raw:
                    out.fast_path += 1
                    continue
                if resource is None:
                    resource = _attributes(LiteResource.FromString(rs.resource).attributes,
                                           None)
                accepted = _accept(raw, resource, out)
                if accepted is not None:
                    out.accepted.append(accepted)
                    keep.append((r, s, i))
    if out.accepted:
        out.wal_payload = body if len(keep) == out.spans else subset(lite, keep, LiteRequest())
    return out


def _accept(raw: bytes, resource: dict[str, Any], out: Decoded) -> Accepted | None:
    service = str(resource.get(_SERVICE_NAME, ""))
    try:
        span = LiteSpan.FromString(raw)
    except DecodeError as exc:
        out.reject(f"a span cannot be decoded: {exc}", service)
        return None
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id):
        out.reject(f"{_describe(span)}: trace id must be 16 bytes and span id 8 bytes",
                   service)
        return None
    try:
        view = _view(span, resource)
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
    accepted = Accepted.of(view)
    assert accepted is not None  # the boundary made context.id a string
    accepted.size = len(raw) + SPAN_OVERHEAD + EVENT_COST * len(view.events)
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
