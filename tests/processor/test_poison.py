"""A poison request fails alone, and a big one leaves nothing behind.

An int attribute encoded as a 10-byte varint (70 bits, which protobuf itself cuts to 64)
once stopped all output, also after a restart (the WAL replayed it). Over gRPC and HTTP,
against a real ``serve``, across a SIGTERM and restart."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

import grpc
from processor_testkit import (
    by_context,
    envelope_spans,
    key_values,
    read_bundles,
    request,
    serve,
    wait_for,
)

from otel_agent_context.processor._wire import LiteRequest, LiteSpan

#: a KeyValue "context.bench.poison" = an int as a 10-byte varint holding 70 bits
_KEY = b"context.bench.poison"
_VALUE = b"\x18" + b"\xff" * 9 + b"\x7f"  # AnyValue.int_value, every one of 70 bits set
POISON = b"\x0a" + bytes([len(_KEY)]) + _KEY + b"\x12" + bytes([len(_VALUE)]) + _VALUE


def poisoned(context_id: str, trace: int, *, stages: int = 1, send: int | None = None
             ) -> bytes:
    """An envelope whose first stage span carries the poison attribute (built from the
    lite types: the generated classes would cut the varint to 64 bits on the way); only its
    first ``send`` spans (all by default): with fewer, the envelope is not complete yet."""
    spans = envelope_spans(trace, context_id, stages=stages)[:send]
    lite = LiteRequest.FromString(request(spans).SerializeToString())
    spans = lite.resource_spans[0].scope_spans[0].spans
    stage = LiteSpan.FromString(spans[1])
    stage.attributes.append(POISON)
    spans[1] = stage.SerializeToString()
    return lite.SerializeToString()


def good(context_id: str, trace: int) -> bytes:
    return request(envelope_spans(trace, context_id, stages=1)).SerializeToString()


def _grpc(address: str, body: bytes) -> None:
    channel = grpc.insecure_channel(address)
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                 request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    export(body, timeout=10)
    channel.close()


def _http(address: str, body: bytes) -> None:
    req = urllib.request.Request(f"http://{address}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as response:
        assert response.status == 200


def test_a_poison_request_fails_alone_over_grpc_and_http_and_after_a_restart(
        tmp_path: Path) -> None:
    out_dir, ready = tmp_path / "out", tmp_path / "ready.json"
    args = ["--out", str(out_dir), "--otlp-grpc", "127.0.0.1:0", "--otlp-http", "127.0.0.1:0",
            "--metrics", "off", "--envelope-timeout", "60"]
    process, addresses = serve(args, ready)
    _grpc(addresses["otlp_grpc"], poisoned("poison-grpc", 1))
    _http(addresses["otlp_http"], poisoned("poison-http", 2))
    _grpc(addresses["otlp_grpc"], good("after-grpc", 3))
    _http(addresses["otlp_http"], good("after-http", 4))
    expected = {"poison-grpc", "poison-http", "after-grpc", "after-http"}
    wait_for(lambda: set(by_context(read_bundles(out_dir))) >= expected, timeout=20)
    found = by_context(read_bundles(out_dir))
    # the poison value is cut to 64 bits as protobuf reads it: -1, written like any int
    (selection,) = [s for s in found["poison-grpc"]["context_selections"]]
    assert selection["selected_item_refs"] == ["doc-0-a"]

    # A poison request durable in the WAL, its envelope not complete yet (one of its two
    # stages sent), then a SIGKILL: the next start replays it from the WAL and the stage
    # that completes it comes after the restart.
    _grpc(addresses["otlp_grpc"], poisoned("poison-pending", 5, stages=2, send=2))
    process.send_signal(signal.SIGKILL)
    process.wait(20)
    assert "poison-pending" not in by_context(read_bundles(out_dir))
    process, addresses = serve(args, ready)
    _http(addresses["otlp_http"],
          request(envelope_spans(5, "poison-pending", stages=2)[2:]).SerializeToString())
    _http(addresses["otlp_http"], good("after-restart", 6))
    _grpc(addresses["otlp_grpc"], good("after-restart-grpc", 7))
    wait_for(lambda: {"poison-pending", "after-restart", "after-restart-grpc"}
             <= set(by_context(read_bundles(out_dir))), timeout=20)
    replayed = by_context(read_bundles(out_dir))["poison-pending"]
    assert [s["selected_item_refs"] for s in replayed["context_selections"]] == \
        [["doc-0-a"], ["doc-1-a"]]  # the replayed poison span and the one sent after
    assert replayed["rebuild"]["status"] == "complete"
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0  # a SIGTERM is enough: nothing is stuck
    # and a start after that replays nothing again
    process, addresses = serve(args, ready)
    _http(addresses["otlp_http"], good("after-second-restart", 8))
    wait_for(lambda: "after-second-restart" in by_context(read_bundles(out_dir)), timeout=20)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) == 0
    counts = [b["context_envelope"]["context_id"] for b in read_bundles(out_dir)]
    assert sorted(counts) == sorted(set(counts))  # each envelope written once
    assert not (out_dir / "dead-letter.jsonl").exists()


def test_the_wire_reader_keeps_64_bits_as_protobuf_does() -> None:
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    from otel_agent_context.processor._wire import decode_key_value

    key, value, kind = decode_key_value(POISON)
    assert (key, kind) == ("context.bench.poison", "int_value")
    assert value == KeyValue.FromString(POISON).value.int_value == -1


def test_big_attribute_values_are_not_kept_after_their_request() -> None:
    # 30 values of 40 MiB once stayed in the decode cache (2.5 GB after all were written).
    import gc

    from otel_agent_context.processor import _decode

    before = sum(len(k) for k in _decode._DECODED)
    for i in range(3):
        big = {"context.bench.blob": "x" * (8 << 20) + str(i)}
        spans = envelope_spans(900 + i, f"big-{i}", stages=1)
        spans[1].attributes.extend(key_values(big))
        body = request(spans).SerializeToString()
        decoded = _decode.decode_request(body, _decode.parse_protobuf(body))
        assert decoded.accepted
        del decoded, body, spans
    gc.collect()
    assert sum(len(k) for k in _decode._DECODED) - before < 1 << 20  # not 24 MiB more
