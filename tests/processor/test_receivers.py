"""Real transports: the stock OTLP exporters and raw clients against an in-process processor.

The central check: bundles written by the processor equal the in-process rebuild of the
very same spans, over gRPC and over HTTP, from our own API (the demo agent) and from a
raw-SDK emitter that knows only the wire contract.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from processor_testkit import (
    by_context,
    envelope_spans,
    fast_spans,
    normalise,
    read_bundles,
    request,
    span,
    wait_for,
)

from otel_agent_context import bundle_json_schema
from otel_agent_context._demo_agent import run_demo
from otel_agent_context.rebuild import rebuild, view_from_readable_span


def _provider(exporter: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _exporter(protocol: str, processor: Any, **kwargs: Any) -> Any:
    if protocol == "grpc":
        return GrpcExporter(endpoint=f"http://{processor.addresses['otlp_grpc']}", insecure=True,
                            **kwargs)
    return HttpExporter(endpoint=f"http://{processor.addresses['otlp_http']}/v1/traces",
                        **kwargs)


def _expect_same_bundles(processor: Any, memory: InMemorySpanExporter, count: int) -> list:
    out_dir = processor.config.out_dir
    wait_for(lambda: len(read_bundles(out_dir)) >= count, 15, message=f"{count} bundles")
    got = by_context(read_bundles(out_dir))
    expected = by_context(normalise(rebuild(
        [view_from_readable_span(s) for s in memory.get_finished_spans()])))
    assert got.keys() == expected.keys()
    for context_id, bundle in expected.items():
        assert got[context_id] == bundle, context_id
    return list(got.values())


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_demo_agent_through_the_stock_exporter_equals_in_process_rebuild(
        start_processor, protocol: str) -> None:
    processor = start_processor()
    provider, memory = _provider(_exporter(protocol, processor))
    ids = run_demo(provider, turns=6, seed=11)
    provider.force_flush()
    bundles = _expect_same_bundles(processor, memory, len(ids))
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)
    provider.shutdown()
    validator = jsonschema.Draft202012Validator(bundle_json_schema())
    for bundle in bundles:  # what the processor writes is a valid bundle (contract §5)
        validator.validate(bundle)
    selfm = processor.metrics.self
    assert selfm.get("context_processor_spans_rejected_total", (protocol,)) == 0
    wait_for(lambda: selfm.get("context_processor_bundles_written_total", ("jsonl",)) == len(ids))
    assert selfm.total("context_processor_spans_accepted_total") == sum(
        b["rebuild"]["received_spans"] + 1 for b in bundles)


def _raw_sdk_agent(tracer: Any) -> None:
    """A third-party emitter: only the OpenTelemetry SDK and the contract's names."""
    cid = "turn-7f3a"
    with tracer.start_as_current_span("invoke_agent raw-agent", attributes={
            "context.id": cid, "context.scope": "turn", "context.span_count": 5,
            "context.schema_version": "0.1", "context.producer": "raw/1.0",
            "gen_ai.agent.name": "raw-agent", "gen_ai.conversation.id": "conv-9"}) as envelope:
        with tracer.start_as_current_span("context.surface", attributes={
                "context.id": cid, "context.surface.id": "srf-1",
                "context.surface.item_count": 3}) as surface:
            for item in ("doc-1", "doc-2", "doc-3"):
                surface.add_event("context.item.added", {
                    "context.item.id": item, "context.item.kind": "document_excerpt",
                    "context.item.token_estimate": 400, "context.item.digest": "sha256:00"})
        with tracer.start_as_current_span("context.selection", attributes={
                "context.id": cid, "context.selection.id": "sel-1",
                "context.surface.id": "srf-1", "context.selection.candidate_count": 3,
                "context.selection.selected_count": 2,
                "context.selection.omitted_count": 1}) as selection:
            selection.add_event("context.item.selected", {
                "context.item.id": "doc-1", "context.selection.rank": 1,
                "context.selection.score": 0.93, "context.selection.signal.bm25": 11.2})
            selection.add_event("context.item.selected", {
                "context.item.id": "doc-3", "context.selection.rank": 2,
                "context.selection.score": 0.71})
            selection.add_event("context.item.omitted", {
                "context.item.id": "doc-2", "context.omission.reason": "duplicate_coverage",
                "context.omission.detail": "same section as doc-1"})
        with tracer.start_as_current_span("context.budget", attributes={
                "context.id": cid, "context.budget.id": "bud-1",
                "context.budget.target": "model", "context.budget.max_tokens": 1000,
                "context.budget.actual_tokens": 1100, "context.budget.overflow": True,
                "context.budget.overflow_tokens": 100, "context.budget.utilization": 1.1,
                "context.budget.overflow_strategy": "truncate_tail"}) as budget:
            budget.add_event("context.budget.truncated", {
                "context.item.id": "doc-3", "context.truncation.strategy": "truncate_tail",
                "context.truncation.tokens_before": 400, "context.truncation.tokens_after": 300})
        with tracer.start_as_current_span("context.assembly", attributes={
                "context.id": cid, "context.assembly.id": "asm-1",
                "context.assembly.target": "model", "context.assembly.block_count": 2}) as asm:
            for index, item in enumerate(("doc-1", "doc-3")):
                asm.add_event("context.assembly.block", {
                    "context.block.index": index, "context.item.id": item,
                    "context.block.tokens": 300, "context.injection.point": "message_history"})
        with tracer.start_as_current_span("chat raw-model", kind=SpanKind.CLIENT, attributes={
                "context.id": cid, "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "raw-model"}) as chat:
            chat.add_event("context.injection.applied", {
                "context.injection.id": "inj-1", "context.assembly.id": "asm-1",
                "context.injection.target": "model",
                "context.injection.point": "message_history"})
        envelope.add_event("context.missing.detected", {
            "context.missing.id": "gap-1", "context.missing.severity": "blocking",
            "context.missing.needed_for": "refund", "context.missing.status": "open"})


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_raw_sdk_emitter_gives_the_same_bundle(start_processor, protocol: str) -> None:
    processor = start_processor()
    provider, memory = _provider(_exporter(protocol, processor))
    _raw_sdk_agent(provider.get_tracer("raw"))
    provider.force_flush()
    (bundle,) = _expect_same_bundles(processor, memory, 1)
    provider.shutdown()
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["rebuild"]["expected_spans"] == bundle["rebuild"]["received_spans"] == 5
    (selection,) = bundle["context_selections"]
    assert selection["selected_item_refs"] == ["doc-1", "doc-3"]
    assert selection["omitted_item_refs"][0]["reason"] == "duplicate_coverage"
    assert bundle["context_budgets"][0]["overflow"] is True
    assert bundle["missing_context"][0]["severity"] == "blocking"
    assert bundle["context_injections"][0]["injection_point"] == "message_history"
    wait_for(lambda: processor.metrics.contract.value(
        "context.envelopes", ("turn", "raw-agent", "complete")) == 1, message="the metric")


# -- raw gRPC and HTTP clients: status codes and messages ------------------------------------


def _stub(processor: Any) -> TraceServiceStub:
    return TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))


def _post(processor: Any, body: bytes, content_type: str = "application/x-protobuf",
          headers: dict[str, str] | None = None, scheme: str = "http",
          context: Any = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"{scheme}://{processor.addresses['otlp_http']}/v1/traces", data=body, method="POST",
        headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def test_grpc_partial_success_names_the_span_and_keeps_the_rest(start_processor) -> None:
    processor = start_processor()
    bad = span(5, 50, "context.selection", {"context.id": "", "context.selection.id": "s"})
    response = _stub(processor).Export(request([*envelope_spans(5, "ctx-ok", stages=1), bad]),
                                       timeout=10)
    assert response.partial_success.rejected_spans == 1
    assert f"span {50:016x} 'context.selection': context.id is empty" in \
        response.partial_success.error_message
    wait_for(lambda: read_bundles(processor.config.out_dir), message="the good envelope")
    assert processor.metrics.self.get("context_processor_spans_rejected_total", ("grpc",)) == 1


def test_grpc_repairs_come_back_as_a_warning_and_are_counted(start_processor, caplog) -> None:
    processor = start_processor()
    odd = span(6, 60, "context.selection", {"context.id": "ctx-r", "context.span_count": "x",
                                            "context.selection.intent": "answer"},
               events=[("context.item.omitted", {"context.item.id": "d1",
                                                 "context.omission.reason": "BUDGET"}),
                       ("context.item.omitted", {"context.item.id": "d2"})])
    with caplog.at_level("WARNING", logger="otel_agent_context.processor._pipeline"):
        # the odd span first: the envelope completes with it as its one promised stage
        response = _stub(processor).Export(
            request([odd, envelope_spans(6, "ctx-r", stages=1)[0]]), timeout=10)
    assert response.partial_success.rejected_spans == 0
    message = response.partial_success.error_message
    assert f"span {60:016x} event context.item.omitted attribute context.omission.reason=BUDGET:"\
        " matched ignoring case: budget" in message
    assert f"span {60:016x} event context.item.omitted: lacks context.omission.reason" in message
    assert f"span {60:016x} attribute context.span_count=x" in message
    get = processor.metrics.self.get
    assert get("context_processor_repairs_total", ("enum_case",)) == 1
    assert get("context_processor_repairs_total", ("event_dropped",)) == 1
    assert get("context_processor_repairs_total", ("type",)) == 1
    warned = [r.getMessage() for r in caplog.records if "off-spec telemetry" in r.getMessage()]
    assert warned and "third-party-agent: 1 enum_case" in warned[0]
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), message="bundle")
    rebuild = bundle["rebuild"]
    assert rebuild["status"] == "partial" and "repaired" in rebuild["partial_reasons"]
    assert {r["kind"] for r in rebuild["repairs"]} == {"enum_case", "event_dropped", "type"}
    omitted = [o for s in bundle["context_selections"] for o in s.get("omitted_item_refs", [])]
    assert omitted == [{"item_id": "d1", "reason": "budget"}]


def test_problems_within_a_warning_window_are_told_at_its_end(start_processor,
                                                              caplog) -> None:
    """The WARNING is rate-limited; what arrives after one, within its window, is logged when
    the window ends (the sweeper looks) and at shutdown, not only if more problems come."""
    processor = start_processor()
    processor.pipeline.problems.every = 1.5
    odd = span(7, 70, "context.selection", {"context.id": "ctx-w", "context.span_count": "x"})
    with caplog.at_level("WARNING", logger="otel_agent_context.processor._pipeline"):
        stub = _stub(processor)
        stub.Export(request([odd, envelope_spans(7, "ctx-w", stages=1)[0]]), timeout=10)
        for n in range(3):  # within the window of the first warning
            late = span(8 + n, 80 + n, "context.selection",
                        {"context.id": f"ctx-l{n}", "context.span_count": [1]})
            stub.Export(request([late, envelope_spans(8 + n, f"ctx-l{n}", stages=1)[0]]),
                        timeout=10)

        def warned() -> list[str]:
            return [r.getMessage() for r in caplog.records
                    if "off-spec telemetry" in r.getMessage()]

        wait_for(lambda: len(warned()) == 2, timeout=10, message="the window's warning")
    first, second = warned()
    assert "third-party-agent: 1 type" in first and "context.span_count=x" in first
    assert "third-party-agent: 3 type" in second and "context.span_count=(1,)" in second


def test_problem_log_flushes_at_its_window_and_when_forced(caplog) -> None:
    from otel_agent_context.processor._pipeline import _ProblemLog

    now = [100.0]
    problems = _ProblemLog(every=10.0, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="otel_agent_context.processor._pipeline"):
        problems.add({("a", "type"): 1}, "e1")
        now[0] = 101.0
        problems.add({("b", "enum_case"): 2}, "e2")
        problems.flush()  # within the window: nothing yet
        assert len(caplog.records) == 1
        now[0] = 111.0
        problems.flush()
        problems.flush()  # nothing left
        problems.add({("c", "type"): 1}, "e3")
        problems.flush(force=True)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert "a: 1 type" in messages[0]
    assert "b: 2 enum_case" in messages[1] and "e2" in messages[1]
    assert "c: 1 type" in messages[2]


def test_a_problem_warning_stays_one_readable_line(caplog) -> None:
    from otel_agent_context.processor._pipeline import _ProblemLog

    problems = _ProblemLog(every=10.0, clock=lambda: 100.0)
    with caplog.at_level("WARNING", logger="otel_agent_context.processor._pipeline"):
        problems.add({(f"{i}" + "s" * 200_000, "type"): 1 for i in range(40)}, "x" * 50_000)
    (message,) = [r.getMessage() for r in caplog.records]
    assert len(message) < 5_000  # 8 MB before
    assert "and 20 more services and reasons" in message
    assert "(200001 characters)" in message and "(50000 characters)" in message


def test_grpc_full_success_leaves_partial_success_unset(start_processor) -> None:
    processor = start_processor()
    response = _stub(processor).Export(request(fast_spans(1, 3)), timeout=10)
    assert not response.HasField("partial_success")
    assert processor.metrics.self.get("context_processor_spans_fast_path_total") == 3


def test_grpc_malformed_and_oversized(start_processor) -> None:
    processor = start_processor(receivers__max_request_bytes=64 * 1024)
    channel = grpc.insecure_channel(processor.addresses["otlp_grpc"])
    raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\x0a\xff\xff\xff\xff\x0fnope", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ExportTraceServiceRequest" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        _stub(processor).Export(request(fast_spans(1, 2000)), timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # nothing else lost: the next good request goes through
    _stub(processor).Export(request(envelope_spans(2, "ctx-after", stages=1)), timeout=10)
    wait_for(lambda: read_bundles(processor.config.out_dir), message="bundle after errors")


def test_http_protobuf_json_and_gzip(start_processor) -> None:
    processor = start_processor()
    proto = request(envelope_spans(1, "ctx-proto", stages=1))
    status, headers, body = _post(processor, proto.SerializeToString())
    assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()

    zipped = gzip.compress(request(envelope_spans(2, "ctx-gzip", stages=1)).SerializeToString())
    status, _, _ = _post(processor, zipped, headers={"Content-Encoding": "gzip"})
    assert status == 200

    document = json_format.MessageToDict(request(envelope_spans(3, "ctx-json", stages=1)))
    for s in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in s:
                import base64
                s[key] = base64.b64decode(s[key]).hex()
    import orjson
    status, headers, body = _post(processor, orjson.dumps(document), "application/json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert orjson.loads(body) == {}
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 3, message="3 bundles")
    assert set(by_context(read_bundles(processor.config.out_dir))) == {
        "ctx-proto", "ctx-gzip", "ctx-json"}


def test_http_errors_carry_a_status_message(start_processor) -> None:
    processor = start_processor(receivers__max_request_bytes=64 * 1024)
    status, _, body = _post(processor, b"\x0a\xff\xff\xff\xff\x0fnope")
    assert status == 400
    assert "malformed ExportTraceServiceRequest" in status_pb2.Status.FromString(body).message
    status, headers, body = _post(processor, b"{oops", "application/json")
    assert status == 400 and headers["Content-Type"] == "application/json"
    import orjson
    assert "malformed JSON" in orjson.loads(body)["message"]
    status, _, _ = _post(processor, b"x", "text/plain")
    assert status == 415
    status, _, body = _post(processor, request(fast_spans(1, 2000)).SerializeToString())
    assert status == 413
    bomb = gzip.compress(b"\x00" * (1 << 20))
    status, _, body = _post(processor, bomb, headers={"Content-Encoding": "gzip"})
    assert status == 413 and b"after decompression" in body
    status, _, _ = _post(processor, b"not gzip", headers={"Content-Encoding": "gzip"})
    assert status == 400
    bad = span(5, 50, "context.selection", {"context.id": ""})
    status, _, body = _post(processor, request([bad]).SerializeToString())
    assert status == 200
    response = ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 1
    req = urllib.request.Request(f"http://{processor.addresses['otlp_http']}/v1/traces")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    with info.value as error:
        assert error.code == 405


def test_bearer_token(start_processor) -> None:
    processor = start_processor(receivers__auth__bearer_token="s3cret")
    with pytest.raises(grpc.RpcError) as info:
        _stub(processor).Export(request(fast_spans(1, 1)), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _stub(processor).Export(request(fast_spans(1, 1)), timeout=10,
                            metadata=(("authorization", "Bearer s3cret"),))
    status, headers, _ = _post(processor, request(fast_spans(1, 1)).SerializeToString())
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    status, _, _ = _post(processor, request(fast_spans(1, 1)).SerializeToString(),
                         headers={"Authorization": "Bearer s3cret"})
    assert status == 200
    provider, memory = _provider(_exporter("grpc", processor,
                                           headers={"authorization": "Bearer s3cret"}))
    run_demo(provider, turns=1, seed=2)
    provider.force_flush()
    _expect_same_bundles(processor, memory, 1)
    provider.shutdown()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    # for the address itself: the test does not depend on ``localhost`` resolving
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_tls_on_both_receivers(start_processor, tmp_path: Path) -> None:
    import ssl

    cert, key = _self_signed(tmp_path)
    processor = start_processor(receivers__otlp_grpc__endpoint="127.0.0.1:0",
                                receivers__otlp_http__endpoint="127.0.0.1:0",
                                receivers__tls__cert_file=str(cert),
                                receivers__tls__key_file=str(key))
    assert all(processor.addresses[r].startswith("127.0.0.1:")
               for r in ("otlp_grpc", "otlp_http"))
    credentials = grpc.ssl_channel_credentials(cert.read_bytes())
    stub = TraceServiceStub(grpc.secure_channel(processor.addresses["otlp_grpc"], credentials))
    stub.Export(request(envelope_spans(1, "ctx-tls-grpc", stages=1)), timeout=10)
    context = ssl.create_default_context(cafile=str(cert))
    status, _, _ = _post(processor, request(envelope_spans(2, "ctx-tls-http", stages=1))
                         .SerializeToString(), scheme="https", context=context)
    assert status == 200
    with pytest.raises(grpc.RpcError):  # plaintext is refused
        _stub(processor).Export(request(fast_spans(1, 1)), timeout=5)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 2, message="2 bundles")


def test_retry_status_carries_retry_info_twice() -> None:
    from otel_agent_context.processor._grpc import RETRY_INFO_TRAILER, retry_status

    status = retry_status("queue full", 1.5)
    assert status.code == grpc.StatusCode.UNAVAILABLE
    trailers = dict(status.trailing_metadata)
    info = error_details_pb2.RetryInfo.FromString(trailers[RETRY_INFO_TRAILER])
    assert (info.retry_delay.seconds, info.retry_delay.nanos) == (1, 500_000_000)
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert details.code == 14
    unpacked = error_details_pb2.RetryInfo()
    assert details.details[0].Unpack(unpacked) and unpacked == info


def test_a_second_trace_with_the_same_context_id_is_a_repair_not_a_second_bundle(
        start_processor) -> None:
    processor = start_processor()
    stub = _stub(processor)
    owner = envelope_spans(7, "ctx-one", stages=2)
    # the owner's envelope span and first stage, then a stray span of trace 8
    stub.Export(request(owner[:2]), timeout=10)
    stray = span(8, 80, "context.selection", {"context.id": "ctx-one",
                                              "context.selection.id": "stray"})
    response = stub.Export(request([stray]), timeout=10)
    assert response.partial_success.rejected_spans == 0
    assert f"span {80:016x}: ctx-one lives in another trace" in \
        response.partial_success.error_message
    stub.Export(request(owner[2:]), timeout=10)
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), message="bundle")
    assert {ref["trace_id"] for ref in bundle["context_envelope"]["telemetry_refs"]} == \
        {f"{7:032x}"}
    assert [s["selection_id"] for s in bundle["context_selections"]] == \
        ["ctx-one-sel0", "ctx-one-sel1"]
    (repair,) = bundle["rebuild"]["repairs"]
    assert repair["kind"] == "foreign_trace" and repair["received"] == f"{8:032x}"
    assert bundle["rebuild"]["status"] == "partial"
    assert processor.metrics.self.get("context_processor_repairs_total",
                                      ("foreign_trace",)) == 1
    # once the owner is written, a stray span is still not a bundle of its own
    stub.Export(request([span(9, 90, "context.selection", {"context.id": "ctx-one"})]),
                timeout=10)
    time.sleep(0.3)
    assert len(read_bundles(processor.config.out_dir)) == 1
