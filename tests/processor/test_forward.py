"""``--forward`` against a real gRPC next hop on loopback that answers status codes: what is
retried (the OTLP specification's list), what is dropped and counted, how an oversize
request is split."""

from __future__ import annotations

import collections
import logging
import threading
import time
import urllib.request
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import (
    envelope_spans,
    fast_spans,
    log_event,
    logs_request,
    request,
    span,
    wait_for,
)

from otel_agent_context.processor._config import parse_target
from otel_agent_context.processor._forward import Forwarder, split_request

_TRACES = "opentelemetry.proto.collector.trace.v1.TraceService"
_LOGS = "opentelemetry.proto.collector.logs.v1.LogsService"
#: The codes the OTLP specification lists as retryable (RESOURCE_EXHAUSTED: with RetryInfo).
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
             grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
             grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.DATA_LOSS}


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")),
              grpc.Status):
    pass


def _with_retry_info(code: grpc.StatusCode, delay: float) -> grpc.Status:
    info = error_details_pb2.RetryInfo(retry_delay=Duration(
        seconds=int(delay), nanos=int((delay - int(delay)) * 1e9)))
    status = status_pb2.Status(code=code.value[0], message="busy, come back later")
    status.details.add().Pack(info)
    return _Status(code, "busy, come back later",
                   (("grpc-status-details-bin", status.SerializeToString()),))


class NextHop:
    """A gRPC server taking raw trace and logs exports: it answers the scripted statuses
    first (None: accept), then accepts everything; every accepted body is kept."""

    def __init__(self, *, max_receive: int | None = None) -> None:
        self.script: collections.deque[Any] = collections.deque()
        self.accepted: list[tuple[str, bytes]] = []
        self.calls: list[tuple[float, int]] = []  # (monotonic time, body size)
        self._lock = threading.Lock()
        options = [] if max_receive is None else [
            ("grpc.max_receive_message_length", max_receive)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=options)
        handlers = {"Export": grpc.unary_unary_rpc_method_handler(self._export(_TRACES))}
        logs_handlers = {"Export": grpc.unary_unary_rpc_method_handler(self._export(_LOGS))}
        self.server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler(_TRACES, handlers),
            grpc.method_handlers_generic_handler(_LOGS, logs_handlers)))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _export(self, service: str) -> Any:
        def export(body: bytes, context: Any) -> bytes:
            with self._lock:
                self.calls.append((time.monotonic(), len(body)))
                answer = self.script.popleft() if self.script else None
            if isinstance(answer, grpc.StatusCode):
                context.abort(answer, f"scripted {answer.name}")
            if answer is not None:
                context.abort_with_status(answer)
            with self._lock:
                self.accepted.append((service, body))
            return b""
        return export

    def spans(self) -> list[bytes]:
        """Span ids of every accepted trace span, in order."""
        out = []
        for service, body in list(self.accepted):
            if service == _TRACES:
                req = ExportTraceServiceRequest.FromString(body)
                out += [s.span_id for rs in req.resource_spans for ss in rs.scope_spans
                        for s in ss.spans]
        return out


@pytest.fixture
def next_hop():
    hops: list[NextHop] = []

    def start(**kwargs: Any) -> NextHop:
        hop = NextHop(**kwargs)
        hops.append(hop)
        return hop

    yield start
    for hop in hops:
        hop.server.stop(0)


@pytest.fixture
def forwarder():
    started: list[Forwarder] = []

    def start(hop: NextHop, **kwargs: Any) -> Forwarder:
        target = parse_target("forward.endpoint", hop.address)
        assert target is not None
        fwd = Forwarder(target, queue_size=kwargs.pop("queue_size", 100), timeout=5, **kwargs)
        fwd.start()
        started.append(fwd)
        return fwd

    yield start
    for fwd in started:
        fwd.close(drain_timeout=1)


def _body(*spans: Any) -> bytes:
    return request(spans).SerializeToString()


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK],
                         ids=lambda c: c.name)
def test_each_code_is_retried_or_dropped_as_the_otlp_specification_says(
        next_hop, forwarder, code: grpc.StatusCode) -> None:
    hop = next_hop()
    hop.script.append(code)
    fwd = forwarder(hop)
    first, second = _body(*fast_spans(1, 1)), _body(*fast_spans(2, 1))
    fwd.put(first)
    fwd.put(second)
    wait_for(lambda: fwd.size == 0, message="the queue drained")
    bodies = [body for _, body in hop.accepted]
    if code in RETRYABLE:
        assert bodies == [first, second] and fwd.dropped == 0
    else:  # refused for good: dropped and counted, and the next one still goes through
        assert bodies == [second]
        assert fwd.dropped_by == {code.name.lower(): 1}
    assert fwd.errors == 1


def test_resource_exhausted_with_retry_info_waits_as_asked_then_delivers(next_hop,
                                                                         forwarder) -> None:
    hop = next_hop()
    hop.script.append(_with_retry_info(grpc.StatusCode.RESOURCE_EXHAUSTED, 0.6))
    fwd = forwarder(hop)
    body = _body(*fast_spans(1, 2))
    fwd.put(body)
    wait_for(lambda: hop.accepted, message="delivered after the retry delay")
    assert [b for _, b in hop.accepted] == [body] and fwd.dropped == 0
    (refused, _), (accepted, _) = hop.calls
    assert accepted - refused >= 0.55  # the RetryInfo's delay, not the 0.1 s backoff


def test_a_refused_request_never_blocks_the_queue_and_is_logged_once(
        next_hop, forwarder, caplog: pytest.LogCaptureFixture) -> None:
    hop = next_hop()
    hop.script.extend([grpc.StatusCode.INVALID_ARGUMENT] * 3
                      + [grpc.StatusCode.PERMISSION_DENIED])
    fwd = forwarder(hop)
    with caplog.at_level(logging.ERROR, logger="otel_agent_context.processor._forward"):
        for trace in range(6):
            fwd.put(_body(*fast_spans(trace + 1, 1)))
        wait_for(lambda: len(hop.accepted) == 2, message="the two accepted requests")
    assert fwd.dropped_by == {"invalid_argument": 3, "permission_denied": 1}
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2, errors  # once per kind
    assert "INVALID_ARGUMENT" in errors[0] and "PERMISSION_DENIED" in errors[1]


def _many_spans(count: int, payload: int) -> list[Any]:
    return [span(7, 100 + i, "work", {"blob": "x" * payload}) for i in range(count)]


def _two_resources(count: int, payload: int) -> bytes:
    req = request(_many_spans(count, payload), service="first")
    second = request([span(8, 500 + i, "work", {"blob": "y" * payload})
                      for i in range(count)], service="second")
    req.resource_spans.extend(second.resource_spans)
    return req.SerializeToString()


def test_an_answer_too_large_splits_the_request_until_the_pieces_fit(next_hop,
                                                                     forwarder) -> None:
    hop = next_hop(max_receive=64 * 1024)
    fwd = forwarder(hop)  # forward.max_request_bytes at its 4 MiB default: learnt from
    body = _two_resources(50, 4000)  # the answer ("Received message larger than max")
    assert len(body) > 5 * 64 * 1024
    fwd.put(body)
    wait_for(lambda: fwd.size == 0, message="the queue drained")
    sent = ExportTraceServiceRequest.FromString(body)
    expected = [s.span_id for rs in sent.resource_spans for ss in rs.scope_spans
                for s in ss.spans]
    assert hop.spans() == expected  # every span once, in order
    assert fwd.dropped == 0 and fwd.splits >= 4
    assert fwd.max_request_bytes == 64 * 1024  # the limit in the answer is learnt
    for _, piece in hop.accepted:  # each piece keeps its resource and scope
        req = ExportTraceServiceRequest.FromString(piece)
        for rs in req.resource_spans:
            service = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            assert service["service.name"] in ("first", "second")
            assert rs.scope_spans[0].scope.name == "raw-emitter"
            blob = rs.scope_spans[0].spans[0].attributes[0].value.string_value
            assert blob[0] == ("x" if service["service.name"] == "first" else "y")
    assert fwd.queued_bytes == 0


def test_a_request_over_the_configured_limit_is_split_before_it_is_sent(next_hop,
                                                                        forwarder) -> None:
    hop = next_hop()
    fwd = forwarder(hop, max_request_bytes=32 * 1024)
    body = _body(*_many_spans(50, 2000))
    fwd.put(body)
    wait_for(lambda: fwd.size == 0, message="the queue drained")
    assert len(hop.spans()) == 50 and fwd.errors == 0 and fwd.splits >= 3
    assert all(size <= 32 * 1024 for _, size in hop.calls)


def test_a_single_span_too_large_is_dropped_with_a_count_and_the_rest_delivered(
        next_hop, forwarder) -> None:
    hop = next_hop(max_receive=64 * 1024)
    fwd = forwarder(hop)
    small, huge = span(9, 1, "small", {"k": "v"}), span(9, 2, "huge", {"blob": "z" * 100_000})
    fwd.put(_body(small, huge))
    fwd.put(_body(*fast_spans(10, 1)))
    wait_for(lambda: fwd.size == 0, message="the queue drained")
    assert hop.spans() == [small.span_id, fast_spans(10, 1)[0].span_id]
    assert fwd.dropped_by == {"too_large": 1}


def test_resource_exhausted_without_retry_info_and_not_about_size_is_dropped(
        next_hop, forwarder) -> None:
    hop = next_hop()
    hop.script.append(grpc.StatusCode.RESOURCE_EXHAUSTED)  # "scripted RESOURCE_EXHAUSTED"
    fwd = forwarder(hop)
    fwd.put(_body(*fast_spans(1, 4)))
    fwd.put(_body(*fast_spans(2, 1)))
    wait_for(lambda: fwd.size == 0, message="the queue drained")
    assert len(hop.spans()) == 1 and fwd.splits == 0
    assert fwd.dropped_by == {"resource_exhausted": 1}


def test_split_keeps_log_records_under_their_resource_and_scope() -> None:
    records = [log_event(1, i + 1, "context.item.added", {"context.item.id": f"i{i}"})
               for i in range(5)]
    body = logs_request(records).SerializeToString()
    halves = split_request(body, logs=True)
    assert halves is not None
    parts = [ExportLogsServiceRequest.FromString(h) for h in halves]
    got = [r for p in parts for r in p.resource_logs[0].scope_logs[0].log_records]
    assert got == records and all(len(p.resource_logs[0].scope_logs[0].log_records)
                                  for p in parts)
    assert all(p.resource_logs[0].resource == logs_request([]).resource_logs[0].resource
               for p in parts)
    assert split_request(logs_request(records[:1]).SerializeToString(), logs=True) is None


def test_processor_counts_forward_drops_by_reason_on_metrics(start_processor,
                                                             next_hop) -> None:
    hop = next_hop()
    hop.script.append(grpc.StatusCode.UNAUTHENTICATED)
    processor = start_processor(forward__endpoint=hop.address)
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    for req in (request(fast_spans(1, 1)), request(envelope_spans(2, "ctx-fwd-drop"))):
        assert isinstance(stub.Export(req, timeout=10), ExportTraceServiceResponse)
    wait_for(lambda: len(hop.accepted) == 1, message="the second request forwarded")
    text = urllib.request.urlopen(
        f"http://{processor.addresses['metrics']}/metrics", timeout=10).read().decode()
    assert 'context_processor_forward_dropped_total{reason="unauthenticated"} 1.0' in text
