"""Helpers for the processor tests: configs on free ports, raw OTLP requests, bounded waits.

Raw requests are built with the OTLP protobuf classes and literal attribute names on
purpose: they stand for a third-party emitter that knows only the wire contract.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_agent_context.processor import ProcessorConfig

REPO = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
             message: str = "condition") -> Any:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def config(tmp_path: Path, **values: Any) -> ProcessorConfig:
    """A config on free loopback ports writing under ``tmp_path`` (dotted keys as kwargs
    with ``__`` for dots, e.g. ``buffer__envelope_timeout=1``)."""
    settings: dict[str, Any] = {
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0",
        "receivers.otlp_http.endpoint": "127.0.0.1:0",
        "metrics.endpoint": "127.0.0.1:0",
        "output.dir": str(tmp_path / "out"),
    }
    settings.update({key.replace("__", "."): value for key, value in values.items()})
    return ProcessorConfig.from_values(settings)


def read_bundles(out_dir: Path) -> list[dict[str, Any]]:
    """Every complete line (a reader racing the writer may see a line still being written:
    only newline-terminated lines are bundles)."""
    bundles = []
    for path in sorted(Path(out_dir).glob("bundles-*.jsonl")):
        *complete, _tail = path.read_bytes().split(b"\n")
        for line in complete:
            if line.strip():
                bundles.append(orjson.loads(line))
    return bundles


def by_context(bundles: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {b["context_envelope"]["context_id"]: b for b in bundles}


def normalise(bundle: Any) -> Any:
    """A bundle as JSON would give it back (tuples -> lists), for equality checks."""
    return orjson.loads(orjson.dumps(bundle))


# -- raw OTLP ---------------------------------------------------------------------------------


def any_value(value: Any) -> AnyValue:
    out = AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, (list, tuple)):
        out.array_value.SetInParent()
        for item in value:
            out.array_value.values.append(any_value(item))
    else:
        raise TypeError(value)
    return out


def key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def span(trace: int, span_id: int, name: str, attributes: Mapping[str, Any],
         *, parent: int | None = None, events: Sequence[tuple[str, Mapping[str, Any]]] = (),
         start: int = 1_700_000_000_000_000_000, duration: int = 1_000_000) -> Span:
    s = Span(trace_id=trace.to_bytes(16, "big"), span_id=span_id.to_bytes(8, "big"),
             name=name, kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start,
             end_time_unix_nano=start + duration)
    if parent is not None:
        s.parent_span_id = parent.to_bytes(8, "big")
    s.attributes.extend(key_values(attributes))
    for index, (event_name, event_attributes) in enumerate(events):
        event = s.events.add()
        event.name = event_name
        event.time_unix_nano = start + index + 1
        event.attributes.extend(key_values(event_attributes))
    return s


def post_json_document(address: str, document: Any, path: str = "/v1/traces") -> Any:
    """POST an OTLP/JSON document to the processor's HTTP receiver; its JSON response."""
    req = urllib.request.Request(f"http://{address}{path}", data=orjson.dumps(document),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as response:
        assert response.status == 200
        return orjson.loads(response.read() or b"{}")


def request(spans: Iterable[Span], service: str = "third-party-agent") -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(key_values({"service.name": service}))
    ss = rs.scope_spans.add()
    ss.scope.name = "raw-emitter"
    ss.spans.extend(spans)
    return req


def envelope_spans(trace: int, context_id: str, *, stages: int = 2, base_span: int = 1,
                   agent: str = "raw-agent") -> list[Span]:
    """An envelope span promising ``stages`` selection spans, then those stage spans."""
    root = base_span
    spans = [span(trace, root, "invoke_agent raw-agent", {
        "context.id": context_id, "context.scope": "turn", "context.span_count": stages,
        "gen_ai.agent.name": agent, "gen_ai.operation.name": "invoke_agent",
    })]
    for index in range(stages):
        spans.append(span(trace, root + 1 + index, "context.selection", {
            "context.id": context_id, "context.selection.id": f"{context_id}-sel{index}",
            "context.selection.candidate_count": 2, "context.selection.selected_count": 1,
            "context.selection.omitted_count": 1,
        }, parent=root, events=[
            ("context.item.selected", {"context.item.id": f"doc-{index}-a",
                                       "context.item.kind": "document_excerpt",
                                       "context.selection.rank": 1,
                                       "context.selection.score": 0.9}),
            ("context.item.omitted", {"context.item.id": f"doc-{index}-b",
                                      "context.item.kind": "document_excerpt",
                                      "context.item.token_estimate": 300,
                                      "context.omission.reason": "budget"}),
        ], start=1_700_000_000_000_000_000 + (index + 1) * 1000))
    return spans


def fast_spans(trace: int, count: int, base_span: int = 1000) -> list[Span]:
    return [span(trace, base_span + i, "GET /health", {"http.request.method": "GET",
                                                       "url.path": "/health"})
            for i in range(count)]


# -- sinks ------------------------------------------------------------------------------------


class StallingSink:
    """A sink that blocks while ``flowing`` is clear (a slow log store, a full disk)."""

    name = "stalling"

    def __init__(self) -> None:
        self.flowing = threading.Event()
        self.written: list[str] = []

    def write(self, batch: Any) -> None:
        if not self.flowing.wait(20):
            raise TimeoutError("still stalled")
        self.written.extend(key[1] for key, _, _ in batch)

    def close(self) -> None:
        self.flowing.set()


# -- subprocess serve ----------------------------------------------------------------------------

#: Every ``serve`` started by a test; conftest kills whatever is still running afterwards.
SPAWNED: list[subprocess.Popen[bytes]] = []


def serve(args: Sequence[str], ready_file: Path, *, timeout: float = 30.0,
          env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Start ``otel-agent-context serve`` and wait for its ready file. Its log goes to a
    file beside the ready file (a pipe nobody reads could fill and block it)."""
    if ready_file.exists():
        ready_file.unlink()
    log_path = ready_file.with_suffix(f".{len(SPAWNED)}.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context", "serve", *args,
             "--ready-file", str(ready_file)],
            stdout=subprocess.DEVNULL, stderr=log, cwd=REPO,
            env={**os.environ, **(env or {})},
        )
    SPAWNED.append(process)

    def ready() -> Any:
        if process.poll() is not None:
            raise AssertionError(f"serve exited {process.returncode}: "
                                 f"{log_path.read_text(errors='replace')}")
        return ready_file.exists() and orjson.loads(ready_file.read_bytes())

    return process, wait_for(ready, timeout, 0.05, "serve to be ready")


# -- raw OTLP logs: context events as log records (OTEP 4430) ---------------------------------


def log_event(trace: int | None, span_id: int | None, name: str,
              attributes: Mapping[str, Any], *, time: int = 1_700_000_000_000_000_500,
              observed: int = 0) -> LogRecord:
    """A context event as a log record: ``event_name`` and its span's trace and span id."""
    record = LogRecord(time_unix_nano=time, observed_time_unix_nano=observed, event_name=name)
    if trace is not None:
        record.trace_id = trace.to_bytes(16, "big")
    if span_id is not None:
        record.span_id = span_id.to_bytes(8, "big")
    record.attributes.extend(key_values(attributes))
    return record


def logs_request(records: Iterable[LogRecord],
                 service: str = "third-party-agent") -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.extend(key_values({"service.name": service}))
    sl = rl.scope_logs.add()
    sl.scope.name = "raw-emitter"
    sl.log_records.extend(records)
    return req


def as_log_events(spans: Sequence[Span]) -> tuple[list[Span], list[LogRecord]]:
    """The same spans with their events moved to log records (the envelope span, the one
    with ``context.scope``, then promises them in ``context.event_count``)."""
    stripped, records = [], []
    for original in spans:
        s = Span()
        s.CopyFrom(original)
        for event in s.events:
            record = LogRecord(time_unix_nano=event.time_unix_nano, event_name=event.name,
                               trace_id=s.trace_id, span_id=s.span_id)
            record.attributes.extend(event.attributes)
            records.append(record)
        del s.events[:]
        stripped.append(s)
    for s in stripped:
        if any(kv.key == "context.scope" for kv in s.attributes):
            s.attributes.append(KeyValue(key="context.event_count",
                                         value=any_value(len(records))))
    return stripped, records
