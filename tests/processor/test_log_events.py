"""Log-based context events (OTEP 4430): the same turn as span events or as log records gives
the same bundle, whatever order events and spans arrive in, across a crash; off-spec records
are repaired or refused alone and reported; late ones are counted.

Telemetry goes through the SDK's own OTLP exporters (traces and logs, gRPC and HTTP) unless
a test needs a record no SDK would write.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from processor_testkit import (
    as_log_events,
    by_context,
    envelope_spans,
    log_event,
    logs_request,
    normalise,
    read_bundles,
    request,
    serve,
    span,
    wait_for,
)

from otel_agent_context import AgentContext
from otel_agent_context._demo_agent import run_demo
from otel_agent_context.rebuild import rebuild, view_from_readable_span
from otel_agent_context.testing import SequentialIds, with_log_events

T0 = 1_760_000_000_000_000_000


# -- one agent turn, its events as span events or as log records -----------------------------


class Emitter:
    """Where a context event goes: ``span.add_event`` or ``logger.emit`` on the span."""

    def __init__(self, logger: Any = None) -> None:
        self.logger = logger
        self.count = 0

    def __call__(self, span: Any, name: str, attributes: dict[str, Any], at: int) -> None:
        if self.logger is None:
            span.add_event(name, attributes, timestamp=at)
            return
        self.logger.emit(event_name=name, attributes=attributes, timestamp=at,
                         context=trace.set_span_in_context(span))
        self.count += 1


def agent_turn(tracer: Any, emit: Emitter, cid: str) -> None:
    """A third-party agent's turn (only the SDK and the contract's names), on a fixed clock so
    both ways of sending events give the same times."""
    clock = itertools.count(T0, 1_000_000)

    @contextlib.contextmanager
    def stage(name: str, attributes: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL
              ) -> Iterator[Any]:
        with tracer.start_as_current_span(name, attributes={"context.id": cid, **attributes},
                                          start_time=next(clock), kind=kind,
                                          end_on_exit=False) as current:
            yield current
        current.end(end_time=next(clock))

    def event(on: Any, name: str, attributes: dict[str, Any]) -> None:
        emit(on, name, attributes, next(clock))

    with stage("invoke_agent raw-agent", {
            "context.scope": "turn", "context.span_count": 5, "context.schema_version": "0.1",
            "gen_ai.agent.name": "raw-agent", "gen_ai.conversation.id": "conv-9"}) as envelope:
        with stage("context.surface", {"context.surface.id": "srf-1",
                                       "context.surface.item_count": 3}) as surface:
            for item in ("doc-1", "doc-2", "doc-3"):
                event(surface, "context.item.added", {
                    "context.item.id": item, "context.item.kind": "document_excerpt",
                    "context.item.token_estimate": 400, "context.item.digest": "sha256:00"})
        with stage("context.selection", {
                "context.selection.id": "sel-1", "context.surface.id": "srf-1",
                "context.selection.candidate_count": 3, "context.selection.selected_count": 2,
                "context.selection.omitted_count": 1}) as selection:
            event(selection, "context.item.selected", {
                "context.item.id": "doc-1", "context.selection.rank": 1,
                "context.selection.score": 0.93, "context.selection.signal.bm25": 11.2})
            event(selection, "context.item.selected", {
                "context.item.id": "doc-3", "context.selection.rank": 2,
                "context.selection.score": 0.71})
            event(selection, "context.item.omitted", {
                "context.item.id": "doc-2", "context.omission.reason": "duplicate_coverage"})
        with stage("context.budget", {
                "context.budget.id": "bud-1", "context.budget.target": "model",
                "context.budget.max_tokens": 1000, "context.budget.actual_tokens": 1100,
                "context.budget.overflow": True, "context.window.id": "win-1"}) as budget:
            event(budget, "context.window.segment", {
                "context.window.segment": "history", "context.window.order": 0,
                "context.window.used_tokens": 700})
            event(budget, "context.budget.truncated", {
                "context.item.id": "doc-3", "context.truncation.strategy": "truncate_tail",
                "context.truncation.tokens_before": 400, "context.truncation.tokens_after": 300})
        with stage("context.assembly", {"context.assembly.id": "asm-1",
                                        "context.assembly.target": "model",
                                        "context.assembly.block_count": 2}) as asm:
            for index, item in enumerate(("doc-1", "doc-3")):
                event(asm, "context.assembly.block", {
                    "context.block.index": index, "context.item.id": item,
                    "context.block.tokens": 300, "context.injection.point": "message_history"})
        with stage("chat raw-model", {"gen_ai.operation.name": "chat",
                                      "gen_ai.request.model": "raw-model"},
                   SpanKind.CLIENT) as chat:
            event(chat, "context.injection.applied", {
                "context.injection.id": "inj-1", "context.assembly.id": "asm-1",
                "context.injection.target": "model",
                "context.injection.point": "message_history"})
        event(envelope, "context.missing.detected", {
            "context.missing.id": "gap-1", "context.missing.severity": "blocking",
            "context.missing.needed_for": "refund", "context.missing.status": "open"})
        if emit.logger is not None:
            envelope.set_attribute("context.event_count", emit.count)


#: events agent_turn emits, and how many sit on the envelope span itself
TURN_EVENTS = 12


def same_records(bundle: dict[str, Any]) -> dict[str, Any]:
    """A bundle without what names its trace: its context id, telemetry refs and ids."""
    copy = orjson.loads(orjson.dumps(bundle))
    envelope = copy["context_envelope"]
    del envelope["context_id"], envelope["telemetry_refs"]
    for event in copy.get("context_events", ()):
        del event["context_id"], event["trace_id"], event["span_id"]
    return copy  # type: ignore[no-any-return]


def _exporters(protocol: str, processor: Any = None, address: dict[str, str] | None = None
               ) -> tuple[Any, Any]:
    addresses = address if address is not None else processor.addresses
    if protocol == "grpc":
        endpoint = f"http://{addresses['otlp_grpc']}"
        return (GrpcExporter(endpoint=endpoint, insecure=True),
                GrpcLogExporter(endpoint=endpoint, insecure=True))
    base = f"http://{addresses['otlp_http']}"
    return HttpExporter(endpoint=f"{base}/v1/traces"), HttpLogExporter(endpoint=f"{base}/v1/logs")


def _span_mode_bundle(start_processor: Callable[..., Any], tmp_path: Path) -> dict[str, Any]:
    """The turn with span events, through the stock trace exporter (a processor of its own)."""
    processor = start_processor(output__dir=str(tmp_path / "span-events"))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporters("grpc", processor)[0]))
    agent_turn(provider.get_tracer("raw"), Emitter(), "turn-spans")
    provider.shutdown()
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10,
                         message="the span-event bundle")
    assert bundle["rebuild"]["status"] == "complete"
    processor.stop()
    return bundle


def _capture_log_mode(cid: str = "turn-logs") -> tuple[list[Any], list[Any]]:
    """The turn with log-based events, captured: (spans, log records) in emission order."""
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    agent_turn(provider.get_tracer("raw"), Emitter(logger_provider.get_logger("raw")), cid)
    captured = list(spans.get_finished_spans()), list(logs.get_finished_logs())
    provider.shutdown()
    logger_provider.shutdown()
    assert len(captured[1]) == TURN_EVENTS
    return captured


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_span_events_and_log_events_give_the_same_bundle(start_processor, tmp_path: Path,
                                                          protocol: str) -> None:
    expected = _span_mode_bundle(start_processor, tmp_path)
    processor = start_processor()
    span_exporter, log_exporter = _exporters(protocol, processor)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(span_exporter, schedule_delay_millis=30))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(log_exporter, schedule_delay_millis=30))
    agent_turn(provider.get_tracer("raw"), Emitter(logger_provider.get_logger("raw")),
               "turn-logs")
    provider.shutdown()
    logger_provider.shutdown()
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10,
                         message="the log-event bundle")
    assert bundle["context_envelope"]["context_id"] == "turn-logs"
    assert same_records(bundle) == same_records(expected)
    assert bundle["rebuild"]["status"] == "complete"
    get = processor.metrics.self.get
    assert get("context_processor_log_events_total", ("accepted",)) == TURN_EVENTS
    assert get("context_processor_log_records_received_total", (protocol,)) == TURN_EVENTS
    exposition = processor.metrics.render(None)[0].decode()
    assert "\ncontext_processor_log_events_waiting 0.0\n" in exposition


def test_events_before_and_after_their_span_join(start_processor, tmp_path: Path) -> None:
    expected = _span_mode_bundle(start_processor, tmp_path)
    spans, records = _capture_log_mode()
    processor = start_processor(buffer__envelope_timeout=30)
    span_exporter, log_exporter = _exporters("grpc", processor)
    selection = next(s for s in spans if s.name == "context.selection")
    selection_id = selection.context.span_id
    before = [r for r in records if r.log_record.span_id == selection_id]
    after = [r for r in records if r.log_record.span_id != selection_id]
    assert len(before) == 3
    # the selection's events come first: they wait for their span
    assert log_exporter.export(before).name == "SUCCESS"
    assert processor.pipeline.events.held_events == 3
    assert span_exporter.export(spans).name == "SUCCESS"
    assert processor.pipeline.events.held_events == 0
    # every span is in, but the envelope promised 12 events and has 3: it waits
    time.sleep(0.2)
    assert read_bundles(processor.config.out_dir) == []
    assert processor.pipeline.buffer.envelopes_in_flight == 1
    # the other events come after their spans and join them
    assert log_exporter.export(after).name == "SUCCESS"
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    assert same_records(bundle) == same_records(expected)
    assert bundle["rebuild"]["status"] == "complete"


def test_promised_events_that_never_come_make_the_envelope_partial(start_processor) -> None:
    spans, records = _capture_log_mode()
    processor = start_processor(buffer__envelope_timeout=0.3, buffer__orphan_timeout=0.3)
    span_exporter, log_exporter = _exporters("grpc", processor)
    assert span_exporter.export(spans).name == "SUCCESS"
    assert log_exporter.export(records[:-1]).name == "SUCCESS"
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    assert bundle["rebuild"]["status"] == "partial"
    assert bundle["rebuild"]["partial_reasons"] == ["timeout", "missing_events"]
    wait_for(lambda: processor.metrics.self.get("context_processor_partial_envelopes_total",
                                                ("missing_events",)) == 1, message="metric")
    # the straggler comes after the bundle was written: late, counted, no second bundle
    assert log_exporter.export(records[-1:]).name == "SUCCESS"
    get = processor.metrics.self.get
    assert get("context_processor_log_events_total", ("late",)) == 1
    # and a retry of an event the bundle has is a duplicate
    assert log_exporter.export(records[:1]).name == "SUCCESS"
    assert get("context_processor_log_events_total", ("duplicate",)) == 1
    assert len(read_bundles(processor.config.out_dir)) == 1


def test_a_retried_logs_request_adds_no_event_twice(start_processor, tmp_path: Path) -> None:
    expected = _span_mode_bundle(start_processor, tmp_path)
    spans, records = _capture_log_mode()
    processor = start_processor()
    span_exporter, log_exporter = _exporters("http", processor)
    assert log_exporter.export(records[:5]).name == "SUCCESS"
    assert log_exporter.export(records[:5]).name == "SUCCESS"  # held, then retried
    assert span_exporter.export(spans).name == "SUCCESS"
    assert log_exporter.export(records[5:9]).name == "SUCCESS"
    assert log_exporter.export(records[5:9]).name == "SUCCESS"  # joined, then retried
    assert log_exporter.export(records[9:]).name == "SUCCESS"
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    assert same_records(bundle) == same_records(expected)
    assert processor.metrics.self.get("context_processor_log_events_total",
                                      ("duplicate",)) == 9


def _timeless(bundle: Any) -> Any:
    """A bundle without times and trace ids: what two runs of the same agent share."""
    if isinstance(bundle, dict):
        return {k: _timeless(v) for k, v in bundle.items()
                if not k.endswith("_at") and k not in ("telemetry_refs", "trace_id", "span_id")}
    if isinstance(bundle, list):
        return [_timeless(v) for v in bundle]
    return bundle


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_api_in_log_mode_through_the_stock_exporters(start_processor, tmp_path: Path,
                                                         protocol: str) -> None:
    """The demo agent with events_as="logs": the processor writes what the in-process rebuild
    of the same spans and records gives, and what the same agent with span events gives."""
    memory_spans, memory_logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    processor = start_processor()
    span_exporter, log_exporter = _exporters(protocol, processor)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(span_exporter, schedule_delay_millis=30))
    provider.add_span_processor(SimpleSpanProcessor(memory_spans))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(log_exporter, schedule_delay_millis=30))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(memory_logs))
    logs_mode = AgentContext(tracer_provider=provider, logger_provider=logger_provider,
                             events_as="logs")
    logs_mode._ids = SequentialIds()
    ids = run_demo(provider, turns=4, seed=3, agent_context=logs_mode)
    provider.shutdown()
    logger_provider.shutdown()
    got = wait_for(lambda: len(read_bundles(processor.config.out_dir)) == len(ids)
                   and by_context(read_bundles(processor.config.out_dir)), 15,
                   message=f"{len(ids)} bundles")
    spans = memory_spans.get_finished_spans()
    assert not [e for s in spans for e in s.events if e.name.startswith("context.")]
    expected = by_context(normalise(rebuild(with_log_events(
        [view_from_readable_span(s) for s in spans], memory_logs.get_finished_logs()))))
    assert got == expected
    assert all(b["rebuild"]["status"] == "complete" for b in got.values())
    # the same agent with span events, through its own processor
    other = start_processor(output__dir=str(tmp_path / "span-events"))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_exporters(protocol, other)[0]))
    span_mode = AgentContext(tracer_provider=provider, events_as="span_events")
    span_mode._ids = SequentialIds()
    assert run_demo(provider, turns=4, seed=3, agent_context=span_mode) == ids
    provider.shutdown()
    with_span_events = wait_for(lambda: len(read_bundles(other.config.out_dir)) == len(ids)
                                and by_context(read_bundles(other.config.out_dir)), 15,
                                message="the span-event bundles")
    assert _timeless(with_span_events) == _timeless(got)


# -- crash and restart -------------------------------------------------------------------------


def test_sigkill_between_log_ack_and_envelope_completion_loses_nothing(
        start_processor, tmp_path: Path) -> None:
    expected = _span_mode_bundle(start_processor, tmp_path)
    spans, records = _capture_log_mode()
    out_dir = tmp_path / "crash-out"
    ready = tmp_path / "ready.json"
    args = ["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "127.0.0.1:0",
            "--metrics", "127.0.0.1:0", "--envelope-timeout", "60", "--orphan-timeout", "120"]
    late = {"context.assembly", "invoke_agent raw-agent"}  # their spans come after the crash
    process, addresses = serve(args, ready)
    span_exporter, log_exporter = _exporters("grpc", address=addresses)
    assert span_exporter.export([s for s in spans if s.name not in late]).name == "SUCCESS"
    assert log_exporter.export(records).name == "SUCCESS"  # acknowledged: in the WAL
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    assert read_bundles(out_dir) == []
    process, addresses = serve(args, ready)
    span_exporter, log_exporter = _exporters("http", address=addresses)
    assert log_exporter.export(records[:4]).name == "SUCCESS"  # a client's retry
    assert span_exporter.export([s for s in spans if s.name in late]).name == "SUCCESS"
    (bundle,) = wait_for(lambda: read_bundles(out_dir), 10, message="the bundle")
    assert same_records(bundle) == same_records(expected)
    assert bundle["rebuild"]["status"] == "complete"
    # once the WAL records it written, crash again: the retried events still in the WAL
    # belong to a written envelope, so the restart neither holds them nor writes anything
    wait_for(lambda: b"context_envelopes_total{" in _scrape(addresses), 10,
             message="the bundle recorded in the WAL")
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    process, addresses = serve(args, ready)
    assert b"\ncontext_processor_log_events_waiting 0.0\n" in _scrape(addresses)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert len(read_bundles(out_dir)) == 1


def _scrape(addresses: dict[str, str]) -> bytes:
    with urllib.request.urlopen(f"http://{addresses['metrics']}/metrics", timeout=5) as answer:
        return answer.read()  # type: ignore[no-any-return]


def test_events_waiting_for_their_span_survive_a_graceful_restart(start_processor) -> None:
    envelope, stage = envelope_spans(1, "ctx-wait", stages=1)
    spans, records = as_log_events([envelope, stage])
    first = start_processor()
    LogsServiceStub(grpc.insecure_channel(first.addresses["otlp_grpc"])).Export(
        logs_request(records), timeout=10)
    assert first.pipeline.events.held_events == 2
    first.stop()
    assert read_bundles(first.config.out_dir) == []
    second = start_processor()  # same WAL
    assert second.pipeline.events.held_events == 2
    TraceServiceStub(grpc.insecure_channel(second.addresses["otlp_grpc"])).Export(
        request(spans), timeout=10)
    (bundle,) = wait_for(lambda: read_bundles(second.config.out_dir), 10, message="bundle")
    assert bundle["rebuild"]["status"] == "complete"
    selection = bundle["context_selections"][0]
    assert selection["selected_item_refs"] == ["doc-0-a"]
    assert selection["omitted_item_refs"] == [{"item_id": "doc-0-b", "reason": "budget"}]


# -- off-spec records: repaired, dropped or refused alone, and reported -------------------------


def _logs_stub(processor: Any) -> LogsServiceStub:
    return LogsServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))


def test_off_spec_log_events_are_repaired_or_dropped_alone_and_reported(start_processor) -> None:
    processor = start_processor()
    envelope, stage = envelope_spans(7, "ctx-odd", stages=1)
    envelope.attributes.extend(span(7, 1, "x", {"context.event_count": 4}).attributes)
    del stage.events[:]
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request([envelope, stage]), timeout=10)
    response = _logs_stub(processor).Export(logs_request([
        log_event(7, 2, "context.item.omitted", {"context.item.id": "d1",
                                                 "context.omission.reason": "BUDGET"}),
        log_event(7, 2, "context.item.omitted", {"context.item.id": "d2",
                                                 "context.omission.reason": "vibes"}),
        log_event(7, 2, "context.item.selected", {"context.selection.rank": 1}),  # no item id
        log_event(7, 2, "context.item.selected", {"context.item.id": "d3"}, time=0,
                  observed=0),
    ]), timeout=10)
    assert response.partial_success.rejected_log_records == 0  # a warning: all were taken
    message = response.partial_success.error_message
    span_id = f"{2:016x}"
    assert (f"span {span_id} event context.item.omitted attribute "
            "context.omission.reason=BUDGET: matched ignoring case: budget") in message
    assert "context.omission.reason=vibes: not a value of the enum" in message
    assert f"span {span_id} event context.item.selected: lacks context.item.id" in message
    assert f"span {span_id} event context.item.selected: no time" in message
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    rebuild = bundle["rebuild"]
    assert rebuild["status"] == "partial" and rebuild["partial_reasons"] == ["repaired"]
    assert sorted(r["kind"] for r in rebuild["repairs"]) == [
        "enum_case", "enum_custom", "event_dropped", "event_time"]
    (selection,) = bundle["context_selections"]
    assert selection["omitted_item_refs"] == [{"item_id": "d1", "reason": "budget"},
                                              {"item_id": "d2", "reason": "custom"}]
    assert selection["selected_item_refs"] == ["d3"]
    get = processor.metrics.self.get
    for kind in ("enum_case", "enum_custom", "event_dropped", "event_time"):
        assert get("context_processor_repairs_total", (kind,)) == 1, kind
    assert get("context_processor_log_events_total", ("accepted",)) == 4


def test_a_context_event_without_its_span_is_rejected_with_a_message(start_processor) -> None:
    processor = start_processor()
    envelope, stage = envelope_spans(8, "ctx-ids", stages=1)
    spans, records = as_log_events([envelope, stage])
    unnamed = log_event(8, None, "context.item.selected", {"context.item.id": "x"})
    no_trace = log_event(None, None, "context.missing.detected", {"context.missing.id": "g"})
    plain = log_event(8, 2, "", {"http.route": "/health"})  # an ordinary log: ignored
    other = log_event(8, 2, "app.checkout", {"context.note": "not ours"})
    response = _logs_stub(processor).Export(
        logs_request([unnamed, *records, no_trace, plain, other]), timeout=10)
    assert response.partial_success.rejected_log_records == 2
    message = response.partial_success.error_message
    assert "log record event context.item.selected: no valid span id" in message
    assert "log record event context.missing.detected: no valid trace id and span id" in message
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request(spans), timeout=10)
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    assert bundle["rebuild"]["status"] == "complete"  # the good records were kept
    get = processor.metrics.self.get
    assert get("context_processor_log_events_total", ("rejected",)) == 2
    assert get("context_processor_log_events_total", ("accepted",)) == 2
    assert get("context_processor_log_records_ignored_total") == 2
    assert get("context_processor_requests_total", ("grpc", "partial")) == 1


def test_log_events_for_a_written_envelope_are_late(start_processor) -> None:
    processor = start_processor()
    envelope, stage = envelope_spans(9, "ctx-late", stages=1)
    spans, records = as_log_events([envelope, stage])
    stub = _logs_stub(processor)
    stub.Export(logs_request(records), timeout=10)
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request(spans), timeout=10)
    wait_for(lambda: read_bundles(processor.config.out_dir), 10, message="bundle")
    straggler = log_event(9, 2, "context.item.selected", {"context.item.id": "doc-9"})
    stub.Export(logs_request([straggler]), timeout=10)
    stub.Export(logs_request(records[:1]), timeout=10)  # a retry of one it had
    get = processor.metrics.self.get
    assert get("context_processor_log_events_total", ("late",)) == 1
    assert get("context_processor_log_events_total", ("duplicate",)) == 1
    assert len(read_bundles(processor.config.out_dir)) == 1
    # a late span brings the events held for it to late too
    stub.Export(logs_request([log_event(9, 3, "context.item.selected",
                                        {"context.item.id": "doc-x"})]), timeout=10)
    assert processor.pipeline.events.held_events == 1
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request([span(9, 3, "context.selection", {"context.id": "ctx-late"}, parent=1)]),
        timeout=10)
    assert processor.pipeline.events.held_events == 0
    assert get("context_processor_log_events_total", ("late",)) == 2
    assert get("context_processor_spans_late_total") == 1


# -- the HTTP receiver: JSON, gzip, errors, auth --------------------------------------------------


def _post(processor: Any, body: bytes, content_type: str = "application/x-protobuf",
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"http://{processor.addresses['otlp_http']}/v1/logs", data=body, method="POST",
        headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def _hex_ids(document: dict[str, Any]) -> dict[str, Any]:
    import base64

    for rl in document["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for record in sl["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    return document


def test_http_logs_protobuf_json_gzip_and_errors(start_processor) -> None:
    processor = start_processor(receivers__max_request_bytes=64 * 1024)
    bundles = {}
    for trace_id, how in ((11, "proto"), (12, "gzip"), (13, "json")):
        spans, records = as_log_events(envelope_spans(trace_id, f"ctx-{how}", stages=1))
        body = logs_request(records)
        if how == "json":
            status, headers, answer = _post(processor, orjson.dumps(_hex_ids(
                json_format.MessageToDict(body))), "application/json")
            assert headers["Content-Type"] == "application/json" and orjson.loads(answer) == {}
        elif how == "gzip":
            status, _, answer = _post(processor, gzip.compress(body.SerializeToString()),
                                      headers={"Content-Encoding": "gzip"})
        else:
            status, headers, answer = _post(processor, body.SerializeToString())
            assert headers["Content-Type"] == "application/x-protobuf"
            assert ExportLogsServiceResponse.FromString(answer) == ExportLogsServiceResponse()
        assert status == 200, how
        TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
            request(spans), timeout=10)
    bundles = wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 3
                       and by_context(read_bundles(processor.config.out_dir)), 10,
                       message="3 bundles")
    for how in ("proto", "gzip", "json"):
        bundle = bundles[f"ctx-{how}"]
        assert bundle["rebuild"]["status"] == "complete", how
        assert bundle["context_selections"][0]["selected_item_refs"] == ["doc-0-a"], how
    # errors: as on /v1/traces, with a google.rpc.Status
    status, _, answer = _post(processor, b"\x0a\xff\xff\xff\xff\x0fnope")
    assert status == 400
    assert "malformed ExportLogsServiceRequest" in status_pb2.Status.FromString(answer).message
    status, _, answer = _post(processor, b"{oops", "application/json")
    assert status == 400 and "malformed JSON" in orjson.loads(answer)["message"]
    big = logs_request([log_event(1, 1, "app.x", {"blob": "x" * 1024}) for _ in range(80)])
    assert _post(processor, big.SerializeToString())[0] == 413
    assert _post(processor, b"x", "text/plain")[0] == 415
    no_span = logs_request([log_event(14, None, "context.item.added", {"context.item.id": "a"})])
    status, _, answer = _post(processor, orjson.dumps(_hex_ids(
        json_format.MessageToDict(no_span))), "application/json")
    assert status == 200
    document = orjson.loads(answer)
    assert document["partialSuccess"]["rejectedLogRecords"] == "1"
    assert "no valid span id" in document["partialSuccess"]["errorMessage"]
    req = urllib.request.Request(f"http://{processor.addresses['otlp_http']}/v1/logs")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    with info.value as error:
        assert error.code == 405


def test_logs_need_the_bearer_token_like_traces(start_processor) -> None:
    processor = start_processor(receivers__auth__bearer_token="s3cret")
    body = logs_request([log_event(1, 1, "context.item.added", {"context.item.id": "a"})])
    with pytest.raises(grpc.RpcError) as info:
        _logs_stub(processor).Export(body, timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _logs_stub(processor).Export(body, timeout=10, metadata=(("authorization", "Bearer s3cret"),))
    status, headers, _ = _post(processor, body.SerializeToString())
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    assert _post(processor, body.SerializeToString(),
                 headers={"Authorization": "Bearer s3cret"})[0] == 200
    get = processor.metrics.self.get
    assert get("context_processor_log_events_total", ("accepted",)) == 1
    assert get("context_processor_log_events_total", ("duplicate",)) == 1  # the same record
    assert processor.metrics.self.get("context_processor_requests_total",
                                      ("grpc", "unauthenticated")) == 1


def test_grpc_logs_malformed_and_oversized(start_processor) -> None:
    processor = start_processor(receivers__max_request_bytes=16 * 1024)
    channel = grpc.insecure_channel(processor.addresses["otlp_grpc"])
    raw = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\x0a\xff\xff\xff\xff\x0fnope", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ExportLogsServiceRequest" in info.value.details()
    big = logs_request([log_event(1, 1, "app.x", {"blob": "x" * 1024}) for _ in range(40)])
    with pytest.raises(grpc.RpcError) as info:
        _logs_stub(processor).Export(big, timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
