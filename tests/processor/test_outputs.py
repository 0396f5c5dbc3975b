"""The other outputs: OTLP log records, forwarding, OTLP metric push; and the crash window
between a bundle written and its WAL record."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import (
    by_context,
    envelope_spans,
    fast_spans,
    log_event,
    logs_request,
    normalise,
    read_bundles,
    request,
    serve,
    wait_for,
)

from otel_agent_context import _semconv as S


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class _Capture:
    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.event = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        self.requests.append(request)
        self.event.set()
        return self.response()


@pytest.fixture
def grpc_server():
    servers = []

    def start(add: Any, capture: Any) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add(capture, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0)


def test_bundles_as_otlp_log_records(start_processor, grpc_server) -> None:
    capture = _Capture()
    capture.response = logs_service_pb2.ExportLogsServiceResponse
    address = grpc_server(logs_service_pb2_grpc.add_LogsServiceServicer_to_server, capture)
    processor = start_processor(sinks__otlp_logs__endpoint=f"http://{address}")
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request(envelope_spans(0xABC, "ctx-logs", stages=2)), timeout=10)
    assert capture.event.wait(10)
    (record,) = capture.requests[0].resource_logs[0].scope_logs[0].log_records
    assert record.event_name == S.SPAN_ENVELOPE == "context.envelope"
    assert record.trace_id.hex() == f"{0xABC:032x}"
    (bundle,) = read_bundles(processor.config.out_dir)
    assert _any_value(record.body) == normalise(bundle)
    attributes = {kv.key: _any_value(kv.value) for kv in record.attributes}
    assert attributes == {S.CONTEXT_ID: "ctx-logs", S.CONTEXT_SCOPE: "turn"}


def test_forward_passes_requests_on_unchanged(start_processor, grpc_server) -> None:
    capture = _Capture()
    capture.response = trace_service_pb2.ExportTraceServiceResponse
    address = grpc_server(trace_service_pb2_grpc.add_TraceServiceServicer_to_server, capture)
    processor = start_processor(forward__endpoint=address)
    sent = [request(fast_spans(1, 4)), request(envelope_spans(2, "ctx-fwd", stages=1))]
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    for req in sent:
        stub.Export(req, timeout=10)
    wait_for(lambda: len(capture.requests) == 2, message="2 forwarded requests")
    assert capture.requests == sent


def test_forward_passes_logs_requests_on_to_the_logs_service(start_processor,
                                                             grpc_server) -> None:
    traces, logs = _Capture(), _Capture()
    traces.response = trace_service_pb2.ExportTraceServiceResponse
    logs.response = logs_service_pb2.ExportLogsServiceResponse

    def add_both(_: Any, server: Any) -> None:
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(logs, server)

    address = grpc_server(add_both, None)
    processor = start_processor(forward__endpoint=address)
    channel = grpc.insecure_channel(processor.addresses["otlp_grpc"])
    sent = [logs_request([log_event(1, 1, "app.started", {"k": "v"})]),
            logs_request([log_event(2, 2, "context.item.added", {"context.item.id": "a"})])]
    for req in sent:
        logs_service_pb2_grpc.LogsServiceStub(channel).Export(req, timeout=10)
    TraceServiceStub(channel).Export(request(fast_spans(1, 1)), timeout=10)
    wait_for(lambda: len(logs.requests) == 2 and traces.requests, message="forwarded")
    assert logs.requests == sent
    assert traces.requests == [request(fast_spans(1, 1))]


def test_metrics_pushed_over_otlp(start_processor, grpc_server) -> None:
    capture = _Capture()
    capture.response = metrics_service_pb2.ExportMetricsServiceResponse
    address = grpc_server(metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server,
                          capture)
    processor = start_processor(metrics__otlp__endpoint=address, metrics__otlp__interval=0.2)
    TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"])).Export(
        request(envelope_spans(3, "ctx-push", stages=1)), timeout=10)

    def pushed() -> set[str]:
        return {m.name for req in capture.requests for rm in req.resource_metrics
                for sm in rm.scope_metrics for m in sm.metrics}

    names = wait_for(lambda: S.METRIC_ENVELOPES in pushed() and pushed(), 10,
                     message="context.envelopes pushed")
    assert S.METRIC_ITEMS_SELECTED in names


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_with_log_sink_down(tmp_path: Path
                              ) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """``serve`` writing to ``tmp_path/out``, its OTLP log sink pointed at a closed port."""
    config = tmp_path / "c.yaml"
    config.write_text("sinks:\n  otlp_logs:\n    timeout: 0.3\n")
    return serve(
        ["--config", str(config), "--out", str(tmp_path / "out"), "--otlp-grpc",
         "127.0.0.1:0", "--otlp-http", "off", "--metrics", "off",
         "--otlp-logs", f"http://127.0.0.1:{_closed_port()}"], tmp_path / "ready.json")


def test_crash_between_bundle_written_and_wal_record_writes_nothing_twice(
        tmp_path: Path) -> None:
    """The JSON Lines sink takes the bundle, the OTLP log sink cannot (so the WAL never
    records it written), SIGKILL: the restart must find the bundle in the file."""
    out_dir = tmp_path / "out"
    process, addresses = _serve_with_log_sink_down(tmp_path)
    stub = TraceServiceStub(grpc.insecure_channel(addresses["otlp_grpc"]))
    stub.Export(request(envelope_spans(1, "ctx-window", stages=2)), timeout=10)
    wait_for(lambda: read_bundles(out_dir), message="the JSON Lines bundle")
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    # the log sink is back: the bundle the crash kept from it reaches it now (at least once)
    capture = _Capture()
    capture.response = logs_service_pb2.ExportLogsServiceResponse
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(capture, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    process, addresses = serve(["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
                                "--otlp-http", "off", "--metrics", "off",
                                "--otlp-logs", f"http://127.0.0.1:{port}"],
                               tmp_path / "ready.json")
    assert capture.event.wait(10)
    sent = [r for req in capture.requests for r in req.resource_logs[0].scope_logs[0].log_records]
    assert [{kv.key: _any_value(kv.value) for kv in r.attributes}[S.CONTEXT_ID]
            for r in sent] == ["ctx-window"]
    stub = TraceServiceStub(grpc.insecure_channel(addresses["otlp_grpc"]))
    stub.Export(request(envelope_spans(1, "ctx-window", stages=2)), timeout=10)  # a retry
    stub.Export(request(envelope_spans(2, "ctx-next", stages=1)), timeout=10)
    wait_for(lambda: len(read_bundles(out_dir)) >= 2, message="the next bundle")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    bundles = read_bundles(out_dir)
    assert sorted(b["context_envelope"]["context_id"] for b in bundles) == [
        "ctx-next", "ctx-window"]
    assert by_context(bundles)["ctx-window"]["rebuild"]["status"] == "complete"
    server.stop(0)


class _StallingLogs:
    """An OTLP log receiver that holds every call while ``flowing`` is clear (a log store
    that stopped answering); it counts a record only when its caller still waits for the
    answer, so a call the sink gave up on does not count as delivered."""

    def __init__(self) -> None:
        self.flowing = threading.Event()
        self.stalled_calls = 0
        self.delivered: list[str] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        if not self.flowing.is_set():
            with self.lock:
                self.stalled_calls += 1
            self.flowing.wait(30)
        if context.is_active():
            with self.lock:
                self.delivered.extend(_context_ids(request))
        return logs_service_pb2.ExportLogsServiceResponse()


def _context_ids(request: Any) -> list[str]:
    return [{kv.key: _any_value(kv.value) for kv in record.attributes}[S.CONTEXT_ID]
            for resource in request.resource_logs for scope in resource.scope_logs
            for record in scope.log_records]


@pytest.fixture
def stalling_logs() -> Any:
    """(receiver, port): a real OTLP/gRPC log receiver on loopback, stalled until its
    ``flowing`` is set (let go before it stops)."""
    receiver = _StallingLogs()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    receiver.flowing.set()
    server.stop(0)


def test_a_stalled_log_sink_does_not_hold_up_json_lines(start_processor,
                                                        stalling_logs) -> None:
    """The log store stops answering: bundles keep reaching the JSON Lines file, none is
    recorded written (the log sink does not have it), and once the store answers again it
    gets every one of them; the file has each once."""
    receiver, port = stalling_logs
    processor = start_processor(sinks__otlp_logs__endpoint=f"http://127.0.0.1:{port}",
                                sinks__otlp_logs__timeout=0.5)
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    out = processor.config.out_dir
    sent = [f"ctx-stall-{n}" for n in range(8)]
    for n, context_id in enumerate(sent):
        stub.Export(request(envelope_spans(100 + n, context_id, stages=1)), timeout=10)
        # one batch at a time: each the next after the log sink stalled on the first
        wait_for(lambda n=n: len(read_bundles(out)) == n + 1, timeout=10,
                 message=f"bundle {n + 1} in JSON Lines while the log sink stalls")
    assert receiver.stalled_calls >= 1 and receiver.delivered == []
    pipeline = processor.pipeline
    assert pipeline.buffer.finished_envelopes == len(sent)  # none recorded written
    assert pipeline.queue_size == len(sent)
    receiver.flowing.set()
    wait_for(lambda: set(receiver.delivered) == set(sent), timeout=20,
             message="every bundle at the log sink after it recovers")
    wait_for(lambda: pipeline.queue_size == 0, message="every batch recorded written")
    assert pipeline.buffer.finished_envelopes == 0
    assert sorted(b["context_envelope"]["context_id"] for b in read_bundles(out)) == sent


def _bundles_then_sigkill(started: tuple[subprocess.Popen[bytes], dict[str, Any]],
                         out_dir: Path, sent: list[str], first_trace: int) -> None:
    """One bundle per context id into JSON Lines, one batch at a time (the log sink is
    down), then SIGKILL."""
    process, addresses = started
    stub = TraceServiceStub(grpc.insecure_channel(addresses["otlp_grpc"]))
    for n, context_id in enumerate(sent):
        stub.Export(request(envelope_spans(first_trace + n, context_id, stages=1)), timeout=10)
        wait_for(lambda n=n: len(read_bundles(out_dir)) == n + 1, timeout=10,
                 message=f"bundle {n + 1} in JSON Lines while the log sink is down")
    process.send_signal(signal.SIGKILL)
    process.wait(10)


def test_bundles_the_log_sink_never_took_reach_it_after_a_sigkill(tmp_path: Path,
                                                                  stalling_logs) -> None:
    """Several batches reach JSON Lines while the log sink is down, then SIGKILL: at the
    restart every one of them goes to the log sink (at least once), none to the file
    twice."""
    out_dir = tmp_path / "out"
    sent = [f"ctx-down-{n}" for n in range(5)]
    _bundles_then_sigkill(_serve_with_log_sink_down(tmp_path), out_dir, sent, 200)
    receiver, port = stalling_logs
    receiver.flowing.set()  # the log store is back
    process, addresses = serve(["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
                                "--otlp-http", "off", "--metrics", "off",
                                "--otlp-logs", f"http://127.0.0.1:{port}"],
                               tmp_path / "ready.json")
    wait_for(lambda: set(receiver.delivered) == set(sent), timeout=20,
             message="every bundle at the log sink after the restart")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert sorted(b["context_envelope"]["context_id"] for b in read_bundles(out_dir)) == sent


def test_bundles_recovered_while_the_log_sink_is_down_reach_it_when_it_comes_up(
        tmp_path: Path) -> None:
    """The log sink is down before the crash and still down at the restart: the bundles
    recovered from JSON Lines wait for it (and survive another SIGKILL meanwhile), and a
    real OTLP/gRPC log receiver started after the processor gets every one of them; the
    file has each once."""
    out_dir = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text("sinks:\n  otlp_logs:\n    timeout: 0.3\n")
    port = _closed_port()
    args = ["--config", str(config), "--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
            "--otlp-http", "off", "--metrics", "off", "--otlp-logs", f"http://127.0.0.1:{port}"]
    sent = [f"ctx-late-{n}" for n in range(4)]
    _bundles_then_sigkill(serve(args, tmp_path / "ready.json"), out_dir, sent, 300)
    for _ in range(2):  # restarted with the sink still down, and killed again
        process, addresses = serve(args, tmp_path / "ready.json")
        time.sleep(1.0)  # the log sink tried (and failed) meanwhile
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    process, addresses = serve(args, tmp_path / "ready.json")
    stub = TraceServiceStub(grpc.insecure_channel(addresses["otlp_grpc"]))
    stub.Export(request(envelope_spans(310, "ctx-after", stages=1)), timeout=10)
    wait_for(lambda: len(read_bundles(out_dir)) == len(sent) + 1, timeout=10,
             message="a new bundle in JSON Lines while the log sink is still down")
    receiver = _StallingLogs()
    receiver.flowing.set()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(receiver, server)
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()  # the log store comes up after the processor
    try:
        wait_for(lambda: set(receiver.delivered) == {*sent, "ctx-after"}, timeout=60,
                 message="every recovered bundle, and the new one, at the log sink")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        server.stop(0)
    assert sorted(b["context_envelope"]["context_id"] for b in read_bundles(out_dir)) == [
        "ctx-after", *sent]
