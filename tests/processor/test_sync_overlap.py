"""The emitter rebuilds a request's envelopes while the WAL's fsync of that request runs,
and nothing of them is written until the fsync has answered (the ack waits for the same
fsync). A request whose fsync fails is refused, and the envelopes it finished are written
all the same: the sender's retry is a duplicate of spans already held, so nothing else
would write them before a restart.

The seam is the WAL's ``fdatasync`` (held on an event, or failing with EIO); the rest is
real: the processor's gRPC receiver, a gRPC client over loopback, the emitter thread, the
JSON Lines file.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import (
    as_log_events,
    by_context,
    envelope_spans,
    logs_request,
    read_bundles,
    request,
    wait_for,
)

from otel_agent_context.processor import _wal
from otel_agent_context.rebuild import rebuild_envelope

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class _Export(threading.Thread):
    """One Export call on a thread of its own: its error, or None once answered OK."""

    def __init__(self, address: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.address, self.body = address, body
        self.error: grpc.RpcError | None = None
        self.answered = threading.Event()

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address)
        export = channel.unary_unary(_EXPORT, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        try:
            export(self.body, timeout=20)
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            channel.close()
            self.answered.set()


def _rebuild_recording(rebuilt: threading.Event) -> Any:
    def rebuild(spans: Any, **kwargs: Any) -> Any:
        rebuilt.set()
        return rebuild_envelope(spans, **kwargs)
    return rebuild


def _hold_fsync(monkeypatch: Any) -> tuple[threading.Event, threading.Event]:
    """The WAL's fdatasync held until released: (set when it begins, the release)."""
    syncing, release = threading.Event(), threading.Event()
    real = _wal._fdatasync

    def held_sync(fd: int) -> None:
        syncing.set()
        release.wait(20)
        real(fd)

    monkeypatch.setattr(_wal, "_fdatasync", held_sync)
    return syncing, release


def test_envelopes_are_rebuilt_during_the_fsync_and_written_after_it(
        start_processor, monkeypatch, tmp_path: Path) -> None:
    rebuilt = threading.Event()
    processor = start_processor(rebuild=_rebuild_recording(rebuilt),
                                receivers__otlp_http__endpoint="off", metrics__endpoint="off")
    syncing, release = _hold_fsync(monkeypatch)
    body = request(envelope_spans(1, "ctx-overlap", stages=2)).SerializeToString()
    call = _Export(processor.addresses["otlp_grpc"], body)
    call.start()
    try:
        assert syncing.wait(10), "the request's WAL fsync never began"
        # the emitter has the envelope while the fsync is held ...
        wait_for(rebuilt.is_set, timeout=5, message="the envelope rebuilt during the fsync")
        # ... and neither the ack nor the bundle goes before it answers
        assert not call.answered.wait(0.3)
        assert read_bundles(tmp_path / "out") == []
        assert processor.pipeline.queue_size == 1
    finally:
        release.set()
    call.join(20)
    assert call.answered.is_set() and call.error is None
    wait_for(lambda: read_bundles(tmp_path / "out"), message="the bundle written")
    assert list(by_context(read_bundles(tmp_path / "out"))) == ["ctx-overlap"]


def test_a_failed_fsync_refuses_the_request_and_still_writes_its_envelope_once(
        start_processor, monkeypatch, tmp_path: Path) -> None:
    rebuilt = threading.Event()
    processor = start_processor(rebuild=_rebuild_recording(rebuilt),
                                receivers__otlp_http__endpoint="off", metrics__endpoint="off")
    real = _wal._fdatasync
    failing = [True]

    def sync(fd: int) -> None:
        if failing[0]:
            rebuilt.wait(5)  # the emitter has rebuilt the envelope while the disk failed
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(_wal, "_fdatasync", sync)
    address = processor.addresses["otlp_grpc"]
    body = request(envelope_spans(2, "ctx-refused", stages=2)).SerializeToString()
    first = _Export(address, body)
    first.start()
    first.join(20)
    assert first.error is not None and first.error.code() == grpc.StatusCode.UNAVAILABLE
    pipeline = processor.pipeline
    metrics = pipeline.metrics.self
    wait_for(lambda: pipeline.queue_size == 0, message="the refused request's envelope written")
    assert metrics.get("context_processor_wal_write_errors_total") >= 1.0
    failing[0] = False  # the disk is back: the sender retries, and sends the next request
    retry = _Export(address, body)
    retry.start()
    retry.join(20)
    assert retry.error is None  # its spans are held already: a duplicate, acknowledged
    after = _Export(address, request(envelope_spans(3, "ctx-next", stages=2)).SerializeToString())
    after.start()
    after.join(20)
    assert after.error is None
    wait_for(lambda: len(read_bundles(tmp_path / "out")) == 2, message="both bundles written")
    wait_for(lambda: pipeline.queue_size == 0, message="the next recorded written")
    assert sorted(b["context_envelope"]["context_id"]
                  for b in read_bundles(tmp_path / "out")) == ["ctx-next", "ctx-refused"]
    assert metrics.get("context_processor_bundles_written_total", ("jsonl",)) == 2.0


def test_a_failed_fsync_of_the_events_that_complete_an_envelope_still_writes_it(
        start_processor, monkeypatch, tmp_path: Path) -> None:
    # log-based events: the envelope waits for them, and the request carrying them finishes
    # it; that request's fsync fails, and the bundle is written all the same
    processor = start_processor(receivers__otlp_http__endpoint="off", metrics__endpoint="off",
                                buffer__envelope_timeout=30)
    spans, records = as_log_events(envelope_spans(4, "ctx-events", stages=2))
    assert records
    channel = grpc.insecure_channel(processor.addresses["otlp_grpc"])
    try:
        TraceServiceStub(channel).Export(request(spans), timeout=20)
        assert processor.pipeline.buffer.envelopes_in_flight == 1

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(_wal, "_fdatasync", failing)
        with pytest.raises(grpc.RpcError) as refused:
            LogsServiceStub(channel).Export(logs_request(records), timeout=20)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        (bundle,) = wait_for(lambda: read_bundles(tmp_path / "out"), 10,
                             message="the envelope the refused events finished, written")
        assert bundle["context_envelope"]["context_id"] == "ctx-events"
        assert bundle["rebuild"]["status"] == "complete"
    finally:
        channel.close()


def test_an_envelope_ready_to_write_does_not_wait_for_another_requests_stalled_fsync(
        start_processor, monkeypatch, tmp_path: Path) -> None:
    # an incomplete envelope, acknowledged, times out while a later request's fsync hangs:
    # it is written during the hang (the emitter puts the waiting batch behind it)
    processor = start_processor(receivers__otlp_http__endpoint="off", metrics__endpoint="off",
                                buffer__envelope_timeout=1)
    address = processor.addresses["otlp_grpc"]
    early = _Export(address, request(envelope_spans(5, "ctx-early", stages=2)[:1])
                    .SerializeToString())
    early.start()
    early.join(20)
    assert early.error is None
    syncing, release = _hold_fsync(monkeypatch)
    held = _Export(address, request(envelope_spans(6, "ctx-held", stages=2)).SerializeToString())
    held.start()
    try:
        assert syncing.wait(10), "the request's WAL fsync never began"
        (bundle,) = wait_for(lambda: read_bundles(tmp_path / "out"), 10,
                             message="the timed-out envelope written during the hang")
        assert bundle["context_envelope"]["context_id"] == "ctx-early"
        assert not held.answered.is_set()
    finally:
        release.set()
    held.join(20)
    assert held.error is None
    wait_for(lambda: len(read_bundles(tmp_path / "out")) == 2, message="the held one after")
