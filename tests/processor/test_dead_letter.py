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


def test_a_dead_letter_cut_short_leaves_no_half_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A write cut short (a full disk mid-line) is cut back, so the next dead letter, once
    there is room again, is a line of its own. A file that accepts a few bytes and then
    fails stands in for the full disk (the tmpfs test in test_full_disk.py needs root)."""
    from types import SimpleNamespace

    errors: list[tuple[Any, ...]] = []
    written: list[tuple[Any, ...]] = []

    class Metrics:
        def inc(self, name: str, labels: Any, value: int = 1) -> None:
            (errors if "errors" in name else written).append((name, labels, value))

    fake = SimpleNamespace(config=SimpleNamespace(out_dir=str(tmp_path)),
                           metrics=SimpleNamespace(self=Metrics()))
    real_open = builtins.open

    class FullDisk:
        """Writes 100 bytes of what it is given, then fails as a full disk does."""

        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.handle.close()

        def tell(self) -> int:
            return int(self.handle.tell())

        def truncate(self, size: int) -> int:
            return int(self.handle.truncate(size))

        def write(self, data: bytes) -> int:
            self.handle.write(data[:100])
            self.handle.flush()
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            self.handle.flush()

    first = orjson.dumps({"trace_id": "t1", "context_id": "c1", "spans": ["x" * 5000]}) + b"\n"
    second = orjson.dumps({"trace_id": "t2", "context_id": "c2", "spans": []}) + b"\n"
    monkeypatch.setattr(builtins, "open", lambda *a, **k: FullDisk(real_open(*a, **k)))
    _pipeline.Pipeline._write_dead_letter(fake, [(("t1", "c1"), first)])  # type: ignore[arg-type]
    monkeypatch.setattr(builtins, "open", real_open)
    _pipeline.Pipeline._write_dead_letter(fake, [(("t2", "c2"), second)])  # type: ignore[arg-type]
    lines = (tmp_path / _pipeline.DEAD_LETTER).read_bytes().splitlines()
    assert [orjson.loads(line)["context_id"] for line in lines] == ["c2"]
    assert [e[1] for e in errors] == [("dead_letter",)]
    assert written == [("context_processor_bundles_written_total", ("dead_letter",), 1)]


def test_a_bundle_of_unexpected_shape_is_dead_lettered_not_retried(
        start_processor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A rebuild bug that returns a bundle the emitter cannot read (its repairs not a list
    of records) is the same as one that raises: dead-lettered once, the stream goes on."""
    for name in ("encode_bundle", "encode_indexed"):
        real = getattr(_pipeline, name)

        def encode(bundle: dict[str, Any], real: Any = real) -> Any:
            if bundle["context_envelope"]["context_id"] == BAD:
                bundle["rebuild"]["repairs"] = ["not a record"]
            return real(bundle)
        monkeypatch.setattr(_pipeline, name, encode)
    processor = _run(start_processor, caplog)
    (line,) = (Path(processor.config.out_dir) / _pipeline.DEAD_LETTER).read_bytes().splitlines()
    assert orjson.loads(line)["context_id"] == BAD
