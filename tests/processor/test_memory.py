"""``--max-memory``: one byte budget for spans, events, queues and caches. A flood gets
backpressure (UNAVAILABLE with RetryInfo), not growth; no request takes a part past its cap;
one that could never fit is refused for good; what each part holds is reported."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import (
    REPO,
    StallingSink,
    envelope_spans,
    fast_spans,
    log_event,
    logs_request,
    read_bundles,
    request,
    span,
    wait_for,
)

from otel_agent_context.exceptions import ConfigError
from otel_agent_context.processor import ProcessorConfig
from otel_agent_context.processor._decode import decode_request
from otel_agent_context.processor._memory import SHARES, MemoryCaps, parse_byte_size
from otel_agent_context.rebuild._completion import REASON_EVICTED, TraceBuffer

MiB = 1024 * 1024


@pytest.fixture
def stalled():
    """A stalled sink (a log store that stopped answering), let go before the processor
    stops (its fixture was set up first, so it is torn down after this one)."""
    sinks: list[StallingSink] = []

    def make() -> StallingSink:
        sinks.append(StallingSink())
        return sinks[-1]

    yield make
    for sink in sinks:
        sink.flowing.set()


def _retry_delay(exc: grpc.RpcError) -> float | None:
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


def _held(processor: Any) -> dict[str, int]:
    return processor.pipeline.memory_held()


# -- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "size"), [
    ("512MiB", 512 * MiB), ("1GiB", 1024 * MiB), ("64Mi", 64 * MiB), ("500MB", 500_000_000),
    ("2G", 2_000_000_000), ("1.5MiB", 3 * MiB // 2), (" 8 mib ", 8 * MiB),
    ("268435456", 256 * MiB), ("1_048_576", MiB), (300 * MiB, 300 * MiB),
])
def test_sizes_take_units(text: Any, size: int) -> None:
    assert parse_byte_size("memory.max_bytes", text) == size


@pytest.mark.parametrize("value", ["lots", "-5", "0", "512KiB", "12 parsecs", "1.3B", True,
                                   1.5e9, "MiB", ""])
def test_a_bad_size_is_a_config_error_naming_the_key(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        ProcessorConfig.from_values({"output.dir": str(tmp_path), "memory.max_bytes": value})
    assert info.value.key == "memory.max_bytes"


def test_the_default_fits_a_small_container_and_the_parts_add_up(tmp_path: Path) -> None:
    config = ProcessorConfig.from_values({"output.dir": str(tmp_path)})
    assert config.max_memory == 256 * MiB
    caps = MemoryCaps.split(config.max_memory)
    assert sum(caps.by_part().values()) == pytest.approx(config.max_memory, abs=8)
    assert sum(SHARES.values()) == pytest.approx(1.0)


def test_serve_with_a_bad_max_memory_exits_2_naming_flag_and_key(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otel_agent_context", "serve", "--out", str(tmp_path),
         "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "off", "--metrics", "off",
         "--max-memory", "a lot"],
        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert "memory.max_bytes (--max-memory)" in result.stderr and "a lot" in result.stderr


# -- the buffer's byte cap -------------------------------------------------------------------

def test_buffer_evicts_the_oldest_envelope_past_its_byte_cap() -> None:
    envelopes = [decode_request(request(envelope_spans(t, f"c{t}", stages=3)
                                        ).SerializeToString()).accepted for t in (1, 2, 3)]
    one = sum(a.size for a in envelopes[0][1:])  # the stage spans (no envelope span: pending)
    assert one > 3000
    clock = [0.0]
    buffer = TraceBuffer(envelope_timeout=5, orphan_timeout=20, max_traces=100,
                         max_spans=1000, dedupe_window=60, dedupe_max=100,
                         clock=lambda: clock[0], max_bytes=2 * one + one // 2)
    out: list[Any] = []
    for spans in envelopes:
        clock[0] += 1
        for stage in spans[1:]:
            buffer.add(stage, None, out)
    assert [f.key[1] for f in out] == ["c1"] and out[0].reasons[-1] == REASON_EVICTED
    assert buffer.held_bytes == 2 * one <= buffer.max_bytes
    assert buffer.finished_bytes == one == out[0].size  # moved to the queue, until written
    assert buffer.finished_envelopes == 1
    buffer.release(out)
    assert buffer.finished_bytes == buffer.finished_envelopes == 0


# -- a flood ---------------------------------------------------------------------------------

def test_a_flood_gets_backpressure_not_growth(start_processor, stalled) -> None:
    sink = stalled()
    processor = start_processor(sinks=[sink], memory__max_bytes="2MiB")
    cap = processor.pipeline.memory.envelopes
    assert cap == int(2 * MiB * 0.4) + int(2 * MiB * 0.2)
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    accepted: list[int] = []
    refused: list[int] = []
    peak = 0
    for trace in range(1, 401):
        try:
            stub.Export(request(envelope_spans(trace, f"ctx-flood-{trace}", stages=4)),
                        timeout=10)
            accepted.append(trace)
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc.details()
            assert "memory.max_bytes" in exc.details()
            assert _retry_delay(exc) == 1.0  # pipeline.retry_after
            refused.append(trace)
        held = _held(processor)
        peak = max(peak, held["buffer"] + held["queue"])
        assert held["buffer"] + held["queue"] <= cap
    assert accepted and len(refused) > 200, (len(accepted), len(refused))
    assert peak > cap * 0.9  # it filled up to the cap, and no further
    # OTLP/HTTP gets the same answer: 503 with Retry-After
    post = urllib.request.Request(
        f"http://{processor.addresses['otlp_http']}/v1/traces",
        data=request(envelope_spans(999, "ctx-flood-http")).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"})
    with pytest.raises(urllib.error.HTTPError) as http_info:
        urllib.request.urlopen(post, timeout=10)
    assert http_info.value.code == 503 and http_info.value.headers["Retry-After"] == "1"
    # the sink answers again: what was held is written, the refused retries are taken
    sink.flowing.set()
    wait_for(lambda: _held(processor)["queue"] == 0, message="the queue drained")
    for trace in refused:
        for _ in range(100):
            try:
                stub.Export(request(envelope_spans(trace, f"ctx-flood-{trace}", stages=4)),
                            timeout=10)
                break
            except grpc.RpcError:
                wait_for(lambda: _held(processor)["queue"] < cap // 2, message="room")
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 400, message="400 bundles")
    # each sink is written on its own: the stalled one may take its last batch a moment later
    wait_for(lambda: len(set(sink.written)) == 400, message="400 bundles in the stalled sink")
    assert "ctx-flood-http" not in {key for key in sink.written}


def test_one_request_never_takes_the_envelopes_past_the_cap(start_processor, stalled) -> None:
    processor = start_processor(sinks=[stalled()], memory__max_bytes="4MiB")
    cap = processor.pipeline.memory.envelopes  # 2.4 MiB
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))

    def spans(trace: int, count: int, payload: int) -> Any:
        return request([span(trace, i + 1, "stage", {"context.id": f"big-{trace}",
                                                     "blob": "b" * payload})
                        for i in range(count)])

    stub.Export(spans(1, 100, 10_000), timeout=10)  # about 1.1 MiB, waiting in the buffer
    before = _held(processor)["buffer"]
    assert 1.0 * MiB < before < 1.3 * MiB
    with pytest.raises(grpc.RpcError) as info:  # 1.5 MiB more would pass 2.4 MiB
        stub.Export(spans(2, 150, 10_000), timeout=10)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert _held(processor)["buffer"] == before  # nothing of it was taken
    stub.Export(spans(3, 50, 10_000), timeout=10)  # but a smaller one fits
    assert _held(processor)["buffer"] + _held(processor)["queue"] <= cap
    # a request that could never fit is refused for good: RESOURCE_EXHAUSTED, not retried
    with pytest.raises(grpc.RpcError) as info:
        stub.Export(spans(4, 250, 10_000), timeout=10)
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "memory.max_bytes" in info.value.details() and _retry_delay(info.value) is None
    # and 413 over HTTP
    body = spans(5, 250, 10_000).SerializeToString()
    post = urllib.request.Request(f"http://{processor.addresses['otlp_http']}/v1/traces",
                                  data=body,
                                  headers={"Content-Type": "application/x-protobuf"})
    with pytest.raises(urllib.error.HTTPError) as http_info:
        urllib.request.urlopen(post, timeout=10)
    assert http_info.value.code == 413
    counted = processor.metrics.self.get
    assert counted("context_processor_requests_total", ("grpc", "too_large")) == 1
    assert counted("context_processor_requests_total", ("http", "too_large")) == 1


def test_one_request_never_takes_the_queue_past_its_count(start_processor, stalled) -> None:
    processor = start_processor(sinks=[stalled()], pipeline__queue_size=5)
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))

    def envelopes(first: int, count: int) -> Any:
        return request([s for t in range(first, first + count)
                        for s in envelope_spans(t, f"count-{t}", stages=1)])

    stub.Export(envelopes(1, 3), timeout=10)
    wait_for(lambda: processor.pipeline.queue_size == 3, message="3 envelopes queued")
    with pytest.raises(grpc.RpcError) as info:  # 3 + 3 would pass 5
        stub.Export(envelopes(10, 3), timeout=10)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "pipeline.queue_size" in info.value.details()
    stub.Export(envelopes(20, 2), timeout=10)  # 3 + 2 fits
    wait_for(lambda: processor.pipeline.queue_size == 5, message="5 envelopes queued")
    assert processor.pipeline.buffer.finished_envelopes == 5


def test_by_default_a_stalled_sink_stops_ingest_at_a_couple_of_thousand_envelopes(
        start_processor, stalled) -> None:
    """Under a sustained overload the queue fills to its cap and memory with it (the soak:
    10,000 envelopes, about 95 MiB, the earlier default): the default cap stops it at
    2,048 finished envelopes, eight of the emitter's batches."""
    processor = start_processor(sinks=[stalled()])
    assert processor.config.queue_size == 2048
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    refused = None
    for first in range(1, 4000, 64):
        spans = [s for t in range(first, first + 64)
                 for s in envelope_spans(t, f"cap-{t}", stages=1)]
        try:
            stub.Export(request(spans), timeout=10)
        except grpc.RpcError as exc:
            refused = exc
            break
    assert refused is not None and refused.code() is grpc.StatusCode.UNAVAILABLE
    assert "pipeline.queue_size" in refused.details()
    assert 1900 <= processor.pipeline.buffer.finished_envelopes <= 2048


def test_an_empty_queue_takes_a_request_of_more_envelopes_than_it_holds(start_processor
                                                                        ) -> None:
    processor = start_processor(pipeline__queue_size=2)
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    stub.Export(request([s for t in range(1, 5)
                         for s in envelope_spans(t, f"many-{t}", stages=1)]), timeout=10)
    wait_for(lambda: len(read_bundles(processor.config.out_dir)) == 4, message="4 bundles")
    wait_for(lambda: processor.pipeline.buffer.finished_envelopes == 0, message="released")


def test_events_waiting_for_their_span_are_bounded_with_backpressure(start_processor) -> None:
    processor = start_processor(memory__max_bytes="2MiB")
    cap = processor.pipeline.memory.events
    stub = LogsServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    refused = 0
    for batch in range(60):  # events whose spans never come: they wait
        records = [log_event(batch + 1, i + 1, "context.item.added",
                             {"context.item.id": f"item-{batch}-{i}", "pad": "p" * 200})
                   for i in range(40)]
        try:
            stub.Export(logs_request(records), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.UNAVAILABLE
            refused += 1
        assert _held(processor)["events"] <= cap
    assert refused > 10 and _held(processor)["events"] > cap * 0.8
    orphaned = processor.metrics.self.get("context_processor_log_events_total", ("orphaned",))
    assert orphaned == 0  # refused, not taken and then dropped


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_forward_queue_is_bounded_in_bytes(start_processor) -> None:
    # nothing listens at the next hop: every send fails UNAVAILABLE and is retried
    processor = start_processor(memory__max_bytes="2MiB",
                                forward__endpoint=f"127.0.0.1:{_free_port()}")
    cap = processor.pipeline.memory.forward
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    refused = 0
    for trace in range(1, 61):
        try:
            stub.Export(request([span(trace, 1, "GET /", {"pad": "f" * 20_000})]), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.UNAVAILABLE
            refused += 1
        assert _held(processor)["forward"] <= cap
    assert refused >= 30 and _held(processor)["forward"] > cap - 25_000


def test_the_decode_cache_stays_within_its_share(start_processor) -> None:
    processor = start_processor(memory__max_bytes="2MiB")
    cap = processor.pipeline.memory.decode_cache
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    seen = 0
    for trace in range(1, 31):  # 30 x 100 distinct short attributes: ~1 MB of entries
        attributes = {"context.id": f"cache-{trace}", "context.scope": "turn",
                      "context.span_count": 0}
        attributes.update({f"app.k{i}": f"{trace}-{i}-" + "v" * 200 for i in range(100)})
        stub.Export(request([span(trace, 1, "turn", attributes)]), timeout=10)
        held = _held(processor)["decode_cache"]
        seen = max(seen, held)
        assert held <= cap
    assert seen > cap // 2


def _export_retrying(stub: TraceServiceStub, message: Any) -> None:
    """Export, waiting out backpressure as an OTLP exporter does (1 MiB is a small queue)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            stub.Export(message, timeout=10)
            return
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(_retry_delay(exc) or 0.1)


def test_remembered_keys_of_written_envelopes_stay_within_their_share(start_processor
                                                                     ) -> None:
    """A long stream of distinct envelopes: the keys kept for retries stop at what the
    remembered share holds (before: one per written envelope, up to 100,000, outside the
    budget: the soak's RSS grew with them), and a recent retry is still a duplicate."""
    processor = start_processor(memory__max_bytes="1MiB", wal__fsync=False,
                                output__fsync=False)
    pipeline = processor.pipeline
    keep = pipeline.memory.remembered_envelopes
    assert 100 < keep < 300  # 1 MiB: 15 % for keys, two thirds of it for envelopes' keys
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    sent = 0
    last: Any = None
    for batch in range(150):  # 600 envelopes, twice and more what the share holds
        spans = []
        for k in range(4):
            spans.extend(envelope_spans(batch * 4 + k + 1, f"stream-{batch}-{k}", stages=1))
        last = request(spans)
        _export_retrying(stub, last)
        sent += 4
    out = Path(processor.config.out_dir)
    wait_for(lambda: len(read_bundles(out)) == sent, timeout=30, message="every bundle")
    wait_for(lambda: pipeline.queue_size == 0, message="the queue empty")
    assert len(pipeline.buffer._done) <= keep  # the structure itself, not an estimate
    held = _held(processor)["remembered"]
    assert 0 < held <= pipeline.memory.remembered
    _export_retrying(stub, last)  # a retry of the newest request: still known
    time.sleep(0.5)
    contexts = [b["context_envelope"]["context_id"] for b in read_bundles(out)]
    assert len(contexts) == len(set(contexts)) == sent


def test_remembered_keys_are_counted_at_their_size(start_processor) -> None:
    """Envelopes with long context ids: each remembered key counts its id's size, so the
    remembered part stays within its share (before: 512 bytes a key whatever the id: 150 ids
    of 4 MB held 600 MB past --max-memory while the gauge said 76,800 bytes)."""
    processor = start_processor(memory__max_bytes="8MiB", wal__fsync=False,
                                output__fsync=False)
    pipeline = processor.pipeline
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    long_id = 200_000
    for index in range(12):  # 2.4 MB of ids, twice the remembered share (1.2 MiB)
        _export_retrying(stub, request(envelope_spans(index + 1, f"{index:03d}" + "L" * long_id,
                                                      stages=0)))
    out = Path(processor.config.out_dir)
    wait_for(lambda: len(read_bundles(out)) == 12, timeout=30, message="every bundle")
    wait_for(lambda: pipeline.queue_size == 0, message="the queue empty")
    held = _held(processor)["remembered"]
    assert len(pipeline.buffer._done) * long_id <= held <= pipeline.memory.remembered
    assert len(pipeline.buffer._done) < 12  # the oldest forgotten to stay within the share
    newest = request(envelope_spans(12, "011" + "L" * long_id, stages=0))
    _export_retrying(stub, newest)  # the newest is still remembered: a duplicate
    time.sleep(0.3)
    assert len(read_bundles(out)) == 12


# -- what it reports -------------------------------------------------------------------------

def test_the_gauge_and_readyz_report_what_each_part_holds(start_processor) -> None:
    processor = start_processor(memory__max_bytes="64MiB")
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    stub.Export(request(envelope_spans(9, "ctx-held", stages=3)[1:]), timeout=10)  # pending
    stub.Export(request(fast_spans(9, 3)), timeout=10)
    metrics = f"http://{processor.addresses['metrics']}"
    text = urllib.request.urlopen(f"{metrics}/metrics", timeout=10).read().decode()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line.startswith("context_processor_memory_")}
    held = _held(processor)
    assert values['context_processor_memory_bytes{part="buffer"}'] == held["buffer"] > 3000
    assert values['context_processor_memory_bytes{part="queue"}'] == 0
    limits = {k: v for k, v in values.items() if k.startswith("context_processor_memory_limit")}
    assert set(limits) == {f'context_processor_memory_limit_bytes{{part="{p}"}}'
                           for p in SHARES}
    assert sum(limits.values()) == pytest.approx(64 * MiB, abs=8)
    ready = json.loads(urllib.request.urlopen(f"{metrics}/readyz", timeout=10).read())
    assert ready["memory_bytes"]["buffer"] == held["buffer"]
    assert ready["memory_limit_bytes"]["buffer"] == int(64 * MiB * 0.4)
