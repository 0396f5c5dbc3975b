"""Faults: SIGKILL and restart, duplicates and reordering, envelope span first/last/never,
bad input amid good, a stalled sink, the caps, and a graceful stop."""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from processor_testkit import (
    StallingSink,
    by_context,
    envelope_spans,
    fast_spans,
    read_bundles,
    request,
    serve,
    span,
    wait_for,
)

from otel_agent_context._demo_agent import run_demo
from otel_agent_context._store import open_store
from otel_agent_context.processor._sinks import bundle_key


def _stub(address: str) -> TraceServiceStub:
    return TraceServiceStub(grpc.insecure_channel(address))


def _keys(bundles: list[dict[str, Any]]) -> Counter:
    return Counter(bundle_key(b) for b in bundles)


# -- SIGKILL --------------------------------------------------------------------------------------


def _stream(count: int) -> list[tuple[ExportTraceServiceRequest, set[str]]]:
    """Requests that each complete one envelope and half-send the next one, so envelopes
    are always in flight: (request, context ids it completes)."""
    out = []
    for i in range(count):
        whole = envelope_spans(10_000 + i, f"whole-{i}", stages=3)
        split = envelope_spans(20_000 + i, f"split-{i}", stages=4)
        first_half = split[1:3]  # two stage spans now; envelope span and two more later
        rest = [split[0], *split[3:]] if i else []
        previous = envelope_spans(20_000 + i - 1, f"split-{i - 1}", stages=4) if i else []
        rest = [previous[0], *previous[3:]] if i else []
        out.append((request([*whole, *first_half, *rest, *fast_spans(i + 1, 3)]),
                    {f"whole-{i}", *([f"split-{i - 1}"] if i else [])}))
    return out


def test_sigkill_mid_stream_then_restart_writes_each_acked_envelope_once(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    ready = tmp_path / "ready.json"
    args = ["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "off",
            "--metrics", "127.0.0.1:0", "--envelope-timeout", "60", "--orphan-timeout", "120"]
    stream = _stream(90)
    acked: list[int] = []
    position = 0
    rng = random.Random(7)
    for round_number in range(3):  # three crashes at random points of the stream
        process, addresses = serve(args, ready)
        stub = _stub(addresses["otlp_grpc"])
        if acked:  # the client retries what it last sent, a duplicate delivery
            stub.Export(stream[acked[-1]][0], timeout=10)
        kill_after = position + rng.randint(10, 25)
        stop = threading.Event()

        def killer(process=process, stop=stop) -> None:
            stop.wait(10)
            process.send_signal(signal.SIGKILL)

        thread = threading.Thread(target=killer)
        thread.start()
        try:
            while position < len(stream):
                if position == kill_after:
                    stop.set()  # kill while the next export is in flight
                try:
                    stub.Export(stream[position][0], timeout=10)
                except grpc.RpcError:
                    break  # not acknowledged: retried after the restart
                acked.append(position)
                position += 1
        finally:
            stop.set()
            thread.join()
            process.wait(10)
        assert process.returncode == -signal.SIGKILL, round_number
    process, addresses = serve(args, ready)
    stub = _stub(addresses["otlp_grpc"])
    while position < len(stream):
        stub.Export(stream[position][0], timeout=10)
        acked.append(position)
        position += 1
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    bundles = read_bundles(out_dir)
    counts = _keys(bundles)
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert not duplicates
    # the bundle store (SQLite, the default) holds exactly the same envelopes, once each
    with open_store(str(out_dir / "context.db")) as store:
        stored = store.rows("SELECT trace_id, context_id, status FROM envelopes")
        assert sorted((r["trace_id"], r["context_id"]) for r in stored) == sorted(counts)
        assert {r["context_id"]: r["status"] for r in stored} == {
            b["context_envelope"]["context_id"]: b["rebuild"]["status"] for b in bundles}
    written = by_context(bundles)
    completed = set().union(*(stream[i][1] for i in acked))
    assert completed <= set(written)
    for context_id in completed:
        assert written[context_id]["rebuild"]["status"] == "complete", context_id
    # the last split envelope never got its second half: written partial at the stop
    last = written[f"split-{len(stream) - 1}"]
    assert "shutdown" in last["rebuild"]["partial_reasons"]
    assert "no_envelope_span" in last["rebuild"]["partial_reasons"]


# -- duplicates, reordering, the envelope span's arrival ----------------------------------------


def test_duplicated_and_reordered_batches_are_idempotent(start_processor) -> None:
    processor = start_processor()
    stub = _stub(processor.addresses["otlp_grpc"])
    spans = []
    for trace in range(1, 21):
        spans.extend(envelope_spans(trace, f"ctx-{trace}", stages=3, base_span=trace * 10))
    rng = random.Random(3)
    rng.shuffle(spans)
    batches = [spans[i:i + 7] for i in range(0, len(spans), 7)]
    deliveries = batches + rng.sample(batches, len(batches))  # every batch twice
    rng.shuffle(deliveries)
    for batch in deliveries:
        stub.Export(request(batch), timeout=10)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) >= 20, message="20 bundles")
    time.sleep(0.2)  # would a duplicate make a second bundle? give it the chance
    bundles = read_bundles(processor.config.out_dir)
    assert len(bundles) == 20 and max(_keys(bundles).values()) == 1
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)
    assert processor.metrics.self.get("context_processor_spans_duplicate_total") == len(spans)


@pytest.mark.parametrize("order", ["first", "last"])
def test_envelope_span_first_or_last_completes_at_once(start_processor, order: str) -> None:
    processor = start_processor(buffer__envelope_timeout=30)
    stub = _stub(processor.addresses["otlp_grpc"])
    envelope, *stages = envelope_spans(1, "ctx-order", stages=3)
    sequence = [envelope, *stages] if order == "first" else [*stages, envelope]
    for s in sequence:
        stub.Export(request([s]), timeout=10)
    (bundle,) = wait_for(lambda: read_bundles(processor.config.out_dir), 5, message="bundle")
    assert bundle["rebuild"]["status"] == "complete"


def test_envelope_span_never_comes_partial_after_timeout(
        start_processor, caplog: pytest.LogCaptureFixture) -> None:
    processor = start_processor(buffer__envelope_timeout=0.2, buffer__orphan_timeout=0.5)
    stub = _stub(processor.addresses["otlp_grpc"])
    _, *stages = envelope_spans(1, "ctx-orphan", stages=2)
    envelope, first, _ = envelope_spans(2, "ctx-short", stages=2)
    stub.Export(request([*stages, envelope, first]), timeout=10)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 2, 5, message="2 bundles")
    written = by_context(read_bundles(processor.config.out_dir))
    assert written["ctx-orphan"]["rebuild"]["partial_reasons"][:2] == [
        "no_envelope_span", "timeout"]
    short = written["ctx-short"]["rebuild"]
    assert short["status"] == "partial" and "timeout" in short["partial_reasons"]
    assert short["expected_spans"] == 2 and short["received_spans"] == 1
    wait_for(lambda: processor.metrics.self.get("context_processor_partial_envelopes_total",
                                                ("timeout",)) == 2, message="partial metric")
    # a straggler after emission is late, not a second bundle: counted, told, logged
    straggler = envelope_spans(2, "ctx-short", stages=2)[2]
    with caplog.at_level(logging.WARNING):
        reply = stub.Export(request([straggler]), timeout=10)
        processor.pipeline.problems.flush(force=True)
    assert processor.metrics.self.get("context_processor_spans_late_total") == 1
    assert len(read_bundles(processor.config.out_dir)) == 2
    assert reply.partial_success.rejected_spans == 0
    assert f"span {straggler.span_id.hex()}: ctx-short was written before it came: span " \
        "left out" in reply.partial_success.error_message
    assert "1 late_span" in caplog.text


def test_bad_requests_amid_good_ones_lose_nothing(start_processor) -> None:
    processor = start_processor(receivers__max_request_bytes=32 * 1024)
    address = processor.addresses["otlp_grpc"]
    stub = _stub(address)
    raw = grpc.insecure_channel(address).unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    codes = []
    for i in range(10):
        stub.Export(request(envelope_spans(100 + i, f"good-{i}", stages=2)), timeout=10)
        try:
            if i % 3 == 0:
                raw(b"\xff\xff\xff garbage", timeout=10)
            elif i % 3 == 1:
                stub.Export(request(fast_spans(1, 500)), timeout=10)  # over 32 KiB
            else:
                response = stub.Export(request([span(9, 9, "context.budget", {
                    "context.id": "bad", "context.budget.max_tokens": "lots"})]), timeout=10)
                codes.append(("partial", response.partial_success.rejected_spans))
        except grpc.RpcError as error:
            codes.append((error.code(), None))
    assert Counter(c for c, _ in codes) == {grpc.StatusCode.INVALID_ARGUMENT: 4,
                                            grpc.StatusCode.RESOURCE_EXHAUSTED: 3, "partial": 3}
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 10, message="10 bundles")
    assert set(by_context(read_bundles(processor.config.out_dir))) == {
        f"good-{i}" for i in range(10)}


# -- a stalled sink ----------------------------------------------------------------------------


def test_stalled_sink_pushes_back_then_recovers_with_nothing_lost(start_processor) -> None:
    sink = StallingSink()
    processor = start_processor(sinks=[sink], pipeline__queue_size=2,
                                pipeline__retry_after=0.3)
    address = processor.addresses["otlp_grpc"]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=address, insecure=True), schedule_delay_millis=20,
        max_export_batch_size=8))
    sender = threading.Thread(target=lambda: run_demo(provider, turns=12, seed=8))
    sender.start()

    def refused() -> float:
        return processor.metrics.self.get("context_processor_requests_total",
                                          ("grpc", "unavailable"))

    wait_for(refused, 10, message="backpressure")
    # what a client sees: UNAVAILABLE with RetryInfo in the details and in the trailer (a
    # probe of two envelopes: the queue holds at least one and takes at most two)
    probe = request(envelope_spans(1, "probe", stages=1)
                    + envelope_spans(2, "probe-2", stages=1, base_span=10))
    with pytest.raises(grpc.RpcError) as info:
        _stub(address).Export(probe, timeout=5)
    error = info.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(error.trailing_metadata())
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.ToMilliseconds() == 300
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert details.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    # and over HTTP: 503 with Retry-After
    req = urllib.request.Request(
        f"http://{processor.addresses['otlp_http']}/v1/traces", method="POST",
        data=probe.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"})
    with pytest.raises(urllib.error.HTTPError) as http_info:
        urllib.request.urlopen(req, timeout=5)
    with http_info.value as error:
        assert error.code == 503 and error.headers["Retry-After"] == "1"
    time.sleep(0.5)
    sink.flowing.set()
    sender.join(30)
    provider.shutdown()
    wait_for(lambda: len(sink.written) == 12, 20, message="12 envelopes through the sink")
    assert len(read_bundles(processor.config.out_dir)) == 12
    assert sorted(sink.written) == sorted(by_context(read_bundles(processor.config.out_dir)))
    assert refused() > 0


# -- caps, compaction, graceful stop ------------------------------------------------------------


def test_max_traces_emits_the_oldest_partial(start_processor) -> None:
    processor = start_processor(buffer__max_traces=2)
    stub = _stub(processor.addresses["otlp_grpc"])
    for trace in range(1, 6):
        stub.Export(request(envelope_spans(trace, f"capped-{trace}", stages=2)[1:2]),
                    timeout=10)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 3, message="3 evicted")
    written = by_context(read_bundles(processor.config.out_dir))
    assert set(written) == {"capped-1", "capped-2", "capped-3"}
    assert all("evicted" in b["rebuild"]["partial_reasons"] for b in written.values())
    assert processor.pipeline.buffer.traces_in_flight == 2


def test_wal_is_compacted_once_envelopes_are_written(start_processor) -> None:
    processor = start_processor(wal__segment_bytes=4096)
    stub = _stub(processor.addresses["otlp_grpc"])
    wal = processor.pipeline.wal
    stub.Export(request(envelope_spans(1, "held", stages=2)[1:]), timeout=10)  # stays open
    for trace in range(2, 40):
        stub.Export(request(envelope_spans(trace, f"done-{trace}", stages=2)), timeout=10)
    assert wal.segment_count > 3  # the open envelope pins the oldest segment and all after
    stub.Export(request(envelope_spans(1, "held", stages=2)[:1]), timeout=10)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 39, message="39 bundles")
    wal_dir = Path(processor.config.wal_dir)
    wait_for(lambda: wal.segment_count == 1 and len(list(wal_dir.iterdir())) == 1,
             message="compaction to the active segment")
    assert wal.size_bytes < 4096 + 2048


def test_graceful_stop_flushes_pending_envelopes(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    process, addresses = serve(["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
                                "--otlp-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"],
                               tmp_path / "ready.json")
    _stub(addresses["otlp_grpc"]).Export(
        request(envelope_spans(1, "pending", stages=3)[:2]), timeout=10)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    (bundle,) = read_bundles(out_dir)
    assert bundle["rebuild"]["status"] == "partial"
    assert "shutdown" in bundle["rebuild"]["partial_reasons"]
    # and the WAL holds nothing to replay: a restart writes nothing twice
    process, _ = serve(["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
                        "--otlp-http", "off", "--metrics", "off"], tmp_path / "ready.json")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert len(read_bundles(out_dir)) == 1
    assert orjson.loads((out_dir / "bundles-000001.jsonl").read_bytes().splitlines()[0])


def test_restart_after_the_dedupe_window_still_writes_nothing_twice(tmp_path: Path) -> None:
    """A written envelope whose spans are still in the WAL (an older open envelope pins the
    segment) is skipped at replay even when its done record is older than dedupe_window."""
    out_dir = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text("buffer:\n  dedupe_window: 0.2\n")
    args = ["--config", str(config), "--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0",
            "--otlp-http", "off", "--metrics", "127.0.0.1:0"]
    process, addresses = serve(args, tmp_path / "ready.json")
    stub = _stub(addresses["otlp_grpc"])
    stub.Export(request(envelope_spans(1, "open", stages=2)[1:2]), timeout=10)
    stub.Export(request(envelope_spans(2, "written", stages=1)), timeout=10)

    def recorded() -> bool:  # metrics are derived after the WAL records the bundle written
        url = f"http://{addresses['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return b'context_envelopes_total{agent="raw-agent"' in response.read()

    wait_for(recorded, message="the written envelope recorded in the WAL")
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    time.sleep(0.5)  # past the dedupe window
    process, _ = serve(args, tmp_path / "ready.json")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert sorted(_keys(read_bundles(out_dir)).values()) == [1, 1]
    assert by_context(read_bundles(out_dir))["open"]["rebuild"]["status"] == "partial"
