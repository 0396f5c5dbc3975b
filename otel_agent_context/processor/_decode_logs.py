"""OTLP log requests -> log-based context events, through the same boundary as span events.

OpenTelemetry is moving events from the Span Event API to the Logs API (OTEP 4430): an
event is a log record with ``event_name`` and the trace id and span id of the span it
belongs to. A log record whose ``event_name`` is one of the contract's event names
(``_table.EVENTS``) is read here exactly as that event on that span would be: its
attributes through ``check_attribute`` (via the same cached decoder as span attributes),
then ``check_event``; an event lacking an attribute it must carry is dropped alone (it still
counts as arrived, for ``context.event_count``); time 0 takes the record's observed time, or
else, when it joins, its span's start. Every change is a repair, listed in the bundle and
told to the sender.

* a request whose bytes never contain ``context.`` holds no context event: its records are
  counted and ignored without being walked;
* a contract event record without a usable trace id and span id is rejected, with a message
  (it cannot join any span);
* any other record is ignored (counted).

The records kept are made durable as a minimal ``ExportLogsServiceRequest`` (the request as
it came when every record in it is kept).
"""

from __future__ import annotations

import dataclasses
import hashlib

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from .._table import EVENTS
from ..rebuild._boundary import Repair, check_event, dropped_event, undated_event
from ..rebuild._events import EVENT_OVERHEAD, LogEvent
from ..rebuild._view import EventView
from ._decode import (
    Decoded,
    InvalidRequest,
    _attributes,
    _hex_ids_to_base64,
    _items,
    fast_json,
    load_json,
    parse_dict,
    subset,
)
from ._wire import LiteLogRecord, LiteLogsRequest, LiteResource

__all__ = [
    "DecodedLogs",
    "LogEvent",
    "decode_logs_request",
    "logs_json_to_protobuf",
    "parse_logs_protobuf",
]

_NEEDLE = b"context."
_SERVICE_NAME = "service.name"
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


@dataclasses.dataclass(slots=True)
class DecodedLogs(Decoded):
    """What one logs request held (``spans`` of :class:`Decoded` stays 0)."""

    records: int = 0
    ignored: int = 0
    events: list[LogEvent] = dataclasses.field(default_factory=list)

    def error_message(self) -> str:
        return Decoded.error_message(self).replace(" more spans rejected",
                                               " more log records rejected")


def parse_logs_protobuf(body: bytes) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidRequest(f"malformed ExportLogsServiceRequest protobuf: {exc}") from None
    return request


def logs_json_to_protobuf(body: bytes) -> ExportLogsServiceRequest:
    """OTLP/JSON logs (hex ids, lowerCamelCase, integer enums) -> the protobuf request."""
    document = load_json(body)
    if not isinstance(document, dict):
        raise InvalidRequest("expected a JSON object (ExportLogsServiceRequest)")
    fast = fast_json(document, ExportLogsServiceRequest())  # the common shape, ~10x faster
    if fast is not None:
        return fast
    for r, rl in enumerate(_items(document, "resourceLogs", "resource_logs")):
        if not isinstance(rl, dict):
            raise InvalidRequest(f"resourceLogs[{r}]: expected an object")
        for s, sl in enumerate(_items(rl, "scopeLogs", "scope_logs")):
            if not isinstance(sl, dict):
                raise InvalidRequest(f"resourceLogs[{r}].scopeLogs[{s}]: expected an object")
            for i, record in enumerate(_items(sl, "logRecords", "log_records")):
                where = f"resourceLogs[{r}].scopeLogs[{s}].logRecords[{i}]"
                if not isinstance(record, dict):
                    raise InvalidRequest(f"{where}: expected an object")
                _hex_ids_to_base64(record, where)
    return parse_dict(document, ExportLogsServiceRequest())


def _count(request: ExportLogsServiceRequest) -> int:
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def decode_logs_request(body: bytes,
                        request: ExportLogsServiceRequest | None = None) -> DecodedLogs:
    """Split a logs request (its protobuf encoding) into context events, rejected and
    ignored records. ``request``, the same request parsed by the generated classes (which
    validated all of it), only serves to count an all-ignored request."""
    out = DecodedLogs()
    if _NEEDLE not in body:
        out.records = out.ignored = _count(request if request is not None
                                           else parse_logs_protobuf(body))
        return out
    try:
        lite = LiteLogsRequest.FromString(body)
    except DecodeError as exc:
        raise InvalidRequest(f"malformed ExportLogsServiceRequest protobuf: {exc}") from None
    keep: list[tuple[int, int, int]] = []
    for r, rl in enumerate(lite.resource_logs):
        service: str | None = None
        for s, sl in enumerate(rl.scope_logs):
            for i, raw in enumerate(sl.log_records):
                out.records += 1
                if raw.find(_NEEDLE) == -1:  # not ``in``: see decode_request
                    out.ignored += 1
                    continue
                if service is None:
                    resource = _attributes(LiteResource.FromString(rl.resource).attributes, None)
                    service = str(resource.get(_SERVICE_NAME, ""))
                if _accept(raw, service, out):
                    keep.append((r, s, i))
    if keep:
        out.wal_payload = body if len(keep) == out.records else subset(
            lite, keep, LiteLogsRequest(), ("resource_logs", "scope_logs", "log_records"))
    return out


def _accept(raw: bytes, service: str, out: DecodedLogs) -> bool:
    try:
        record = LiteLogRecord.FromString(raw)
    except DecodeError as exc:
        out.reject(f"a log record cannot be decoded: {exc}", service)
        return False
    name = record.event_name
    if name not in EVENTS:
        out.ignored += 1
        return False
    trace, span = record.trace_id, record.span_id
    if len(trace) != 16 or len(span) != 8 or trace == _ZERO_TRACE or span == _ZERO_SPAN:
        what = "span id" if len(trace) == 16 and trace != _ZERO_TRACE else "trace id and span id"
        out.reject(f"log record event {name}: no valid {what} (a context event must carry "
                   f"the trace id and span id of its span)", service)
        return False
    span_id = span.hex()
    repairs: list[Repair] = []
    try:
        attributes = _attributes(record.attributes, repairs, span_id, name)
    except DecodeError as exc:
        out.reject(f"log record event {name} of span {span_id}: an attribute cannot be "
                   f"decoded: {exc}", service)
        return False
    time = record.time_unix_nano or record.observed_time_unix_nano
    digest = hashlib.blake2b(digest_size=8)
    digest.update(name.encode())
    digest.update(time.to_bytes(8, "little"))
    for encoded in sorted(record.attributes):
        digest.update(len(encoded).to_bytes(4, "little"))
        digest.update(encoded)
    lacking = check_event(name, attributes)
    event: EventView | None = None
    if lacking is not None:
        repairs.append(dropped_event(name, lacking, span_id))
    else:
        event = EventView(name, time, attributes)
        if not time:
            repairs.append(undated_event(name, span_id))
    out.events.append(LogEvent(trace.hex(), span_id, name, event, repairs,
                               int.from_bytes(digest.digest(), "little"),
                               len(raw) + EVENT_OVERHEAD, event is not None and not time))
    if repairs:
        out.repaired(repairs, service)
    return True


