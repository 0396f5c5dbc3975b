"""An envelope that cannot be written fails alone: dead-lettered once and counted, or, when
the dead letter cannot be made or written either, logged and counted; never retried
forever, and the envelopes after it are written (issue 13: a bundle whose encoding raised,
then a dead-letter path that raised again, once held up all output)."""

from __future__ import annotations

import builtins
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import by_context, envelope_spans, read_bundles, request, wait_for

from otel_agent_context.processor import _pipeline
from otel_agent_context.rebuild import rebuild_envelope

BAD = "bad-envelope"


def _export(processor: Any, *context_ids: str) -> None:
    channel = grpc.insecure_channel(processor.addresses["otlp_grpc"])
    stub = TraceServiceStub(channel)
    for trace, context_id in enumerate(context_ids, start=1):
        stub.Export(request(envelope_spans(trace, context_id, stages=1)), timeout=10)
    channel.close()


def _counting_rebuild(calls: Counter[str]) -> Any:
    def rebuild(spans: Any, **kwargs: Any) -> Any:
        bundle = rebuild_envelope(spans, **kwargs)
        calls[bundle["context_envelope"]["context_id"]] += 1
        return bundle
    return rebuild


def _raise_for_bad(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam: encoding the bad envelope's bundle raises (as orjson did on a 70-bit int),
    whichever encoder the emitter uses (the store's child reads indexed lines)."""
    for name in ("encode_bundle", "encode_indexed"):
        real = getattr(_pipeline, name)

        def encode(bundle: dict[str, Any], real: Any = real) -> Any:
            if bundle["context_envelope"]["context_id"] == BAD:
                raise TypeError("Integer exceeds 64-bit range")
            return real(bundle)
        monkeypatch.setattr(_pipeline, name, encode)


def _run(start_processor: Any, caplog: pytest.LogCaptureFixture) -> Any:
    """The bad envelope then two good ones: the good ones are written, the bad one was
    rebuilt once (the emitter once retried a failing batch every second, for good)."""
    calls: Counter[str] = Counter()
    processor = start_processor(rebuild=_counting_rebuild(calls))
    out = processor.config.out_dir
    with caplog.at_level(logging.ERROR, logger=_pipeline.__name__):
        _export(processor, BAD, "good-1", "good-2")
        wait_for(lambda: {"good-1", "good-2"} <= set(by_context(read_bundles(out))),
                 timeout=15, message="the envelopes after the bad one")
        time.sleep(1.5)
    assert BAD not in by_context(read_bundles(out))
    assert calls[BAD] == 1
    assert processor.metrics.self.get("context_processor_rebuild_errors_total") == 1
    return processor


def test_a_bundle_that_cannot_be_encoded_is_dead_lettered_once(
        start_processor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _raise_for_bad(monkeypatch)
    processor = _run(start_processor, caplog)
    (line,) = (Path(processor.config.out_dir) / _pipeline.DEAD_LETTER).read_bytes().splitlines()
    dead = orjson.loads(line)
    assert dead["context_id"] == BAD and "64-bit" in dead["error"]
    assert len(dead["spans"]) == 2
    assert any(BAD in r.getMessage() for r in caplog.records)
    assert processor.metrics.self.get("context_processor_bundles_written_total",
                                      ("dead_letter",)) == 1


def test_a_dead_letter_that_cannot_be_encoded_either_is_still_one_line(
        start_processor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _raise_for_bad(monkeypatch)

    def encode_record(record: dict[str, Any]) -> bytes:
        raise ValueError("the dead letter cannot be encoded either")
    monkeypatch.setattr(_pipeline, "encode_record", encode_record)
    processor = _run(start_processor, caplog)
    (line,) = (Path(processor.config.out_dir) / _pipeline.DEAD_LETTER).read_bytes().splitlines()
    dead = orjson.loads(line)
    assert dead["context_id"] == BAD and dead["spans_lost"] == 2
    assert "cannot be encoded either" in dead["dead_letter_error"]
    assert any(BAD in r.getMessage() for r in caplog.records)


def test_a_dead_letter_file_that_cannot_be_written_is_logged_and_counted(
        start_processor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _raise_for_bad(monkeypatch)
    writes: list[str] = []

    def full_disk_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith(_pipeline.DEAD_LETTER):  # the seam: the disk is full
            writes.append(str(path))
            raise OSError(28, "No space left on device")
        return builtins.open(path, *args, **kwargs)
    monkeypatch.setattr(_pipeline, "open", full_disk_open, raising=False)
    processor = _run(start_processor, caplog)
    assert len(writes) == 1  # tried once, not again and again
    assert processor.metrics.self.get("context_processor_sink_errors_total",
                                      ("dead_letter",)) == 1
    assert any("No space left" in r.getMessage() and BAD in r.getMessage()
               for r in caplog.records)
