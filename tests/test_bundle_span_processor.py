"""The in-process SpanProcessor: the processor's completion engine and rebuild, run on a
worker thread (on_end only enqueues); and the README's example agent."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema
import orjson
import pytest
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_context import AgentContext, bundle_json_schema
from otel_agent_context._demo_agent import run_demo
from otel_agent_context.processor._config import ProcessorConfig
from otel_agent_context.processor._decode import decode_request
from otel_agent_context.rebuild import BundleSpanProcessor, rebuild_envelope
from otel_agent_context.rebuild._completion import REASON_SHUTDOWN, Finished, TraceBuffer

ROOT = Path(__file__).resolve().parents[1]


def _setup(**kwargs: Any) -> tuple[TracerProvider, BundleSpanProcessor, list[dict]]:
    bundles: list[dict] = []
    provider = TracerProvider()
    processor = BundleSpanProcessor(bundles.append, **kwargs)
    provider.add_span_processor(processor)
    return provider, processor, bundles


def _envelope(tracer: Any, cid: str, span_count: int) -> tuple[Any, Any]:
    """An envelope span (not ended) and the context to start its stage spans in."""
    env = tracer.start_span("invoke_agent", attributes={
        "context.id": cid, "context.scope": "turn", "context.span_count": span_count})
    return env, trace.set_span_in_context(env)


def _stage(tracer: Any, cid: str, parent: Any = None, name: str = "s") -> Any:
    return tracer.start_span("context.selection", parent,
                             attributes={"context.id": cid, "context.selection.id": name})


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def _rebuild(bundle: dict) -> dict:
    return bundle["rebuild"]


# -- emission ------------------------------------------------------------------------------------


def test_a_complete_envelope_is_emitted_once_after_force_flush(tmp_path) -> None:
    out = tmp_path / "bundles.jsonl"
    bundles: list[dict] = []
    provider = TracerProvider()
    processor = BundleSpanProcessor(bundles.append, path=out)
    provider.add_span_processor(processor)
    ctx = AgentContext(tracer_provider=provider)
    with ctx.envelope() as env:
        with env.selection() as sel:
            sel.selected("a")
        assert processor.force_flush()
        assert bundles == []  # the envelope span has not ended yet
    assert processor.force_flush()
    assert len(bundles) == 1 and _rebuild(bundles[0])["status"] == "complete"
    provider.shutdown()
    assert len(bundles) == 1  # nothing left to drain
    lines = out.read_text().splitlines()
    assert [json.loads(line) for line in lines] == bundles


def test_on_end_only_enqueues_the_bundle_is_built_on_the_worker_thread() -> None:
    threads: list[threading.Thread] = []
    provider = TracerProvider()
    processor = BundleSpanProcessor(lambda bundle: threads.append(threading.current_thread()))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    env, _ = _envelope(tracer, "c1", 0)
    env.end()  # complete: its bundle is due
    assert processor.force_flush()
    assert len(threads) == 1
    assert threads[0] is not threading.current_thread()
    assert threads[0].daemon and threads[0].name == "BundleSpanProcessor"
    provider.shutdown()


def test_settings_must_be_positive() -> None:
    for name in ("envelope_timeout", "orphan_timeout", "max_spans", "max_traces",
                 "max_queue_size"):
        with pytest.raises(ValueError, match=name):
            BundleSpanProcessor(print, **{name: 0})


def test_spans_without_a_string_context_id_are_not_enqueued() -> None:
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    tracer.start_span("plain", attributes={"http.method": "GET"}).end()
    tracer.start_span("bad", attributes={"context.id": 7}).end()
    tracer.start_span("none").end()
    assert len(processor._queue) == 0
    provider.shutdown()
    assert bundles == []


def test_on_end_reads_context_id_without_a_lookup_through_the_sdk_mapping(monkeypatch) -> None:
    # BoundedAttributes.get finds a missing key by raising and catching KeyError: about
    # 1.5 µs for every span without context.id. on_end reads the dict inside instead.
    caller = threading.current_thread()
    lookups: list[str] = []
    getitem = BoundedAttributes.__getitem__

    def counting(self: BoundedAttributes, key: str) -> Any:
        if threading.current_thread() is caller:
            lookups.append(key)
        return getitem(self, key)

    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    plain = tracer.start_span("plain", attributes={"http.method": "GET"})
    env, _ = _envelope(tracer, "c1", 0)
    monkeypatch.setattr(BoundedAttributes, "__getitem__", counting)
    plain.end()
    env.end()
    monkeypatch.undo()
    assert lookups == []
    assert processor.force_flush()
    assert [b["context_envelope"]["context_id"] for b in bundles] == ["c1"]
    provider.shutdown()


def test_a_span_without_the_sdks_attributes_is_read_through_its_public_attributes() -> None:
    provider, processor, bundles = _setup()

    def made_elsewhere(span_id: int, attributes: dict[str, Any]) -> ReadableSpan:
        context = trace.SpanContext(0xABC, span_id, is_remote=False)
        return ReadableSpan("invoke_agent", context, attributes=MappingProxyType(attributes),
                            start_time=1, end_time=2)

    processor.on_end(made_elsewhere(1, {"http.method": "GET"}))
    processor.on_end(made_elsewhere(2, {
        "context.id": "c1", "context.scope": "turn", "context.span_count": 0}))
    assert processor.force_flush()
    assert [b["context_envelope"]["context_id"] for b in bundles] == ["c1"]
    assert _rebuild(bundles[0])["status"] == "complete"
    provider.shutdown()


# -- the processor's completion rules --------------------------------------------------------


def test_an_envelope_missing_a_promised_span_goes_out_partial_after_envelope_timeout() -> None:
    provider, processor, bundles = _setup(envelope_timeout=0.05)
    tracer = provider.get_tracer("t")
    env, parent = _envelope(tracer, "c1", 2)
    _stage(tracer, "c1", parent).end()
    env.end()  # one of the two promised spans never comes
    assert processor.force_flush() and bundles == []
    _wait_for(lambda: bool(bundles))  # the worker runs the timeout; no flush needed
    (bundle,) = bundles
    assert _rebuild(bundle)["status"] == "partial"
    assert _rebuild(bundle)["partial_reasons"] == ["timeout", "missing_spans"]
    assert _rebuild(bundle)["expected_spans"] == 2 and _rebuild(bundle)["received_spans"] == 1
    provider.shutdown()


def test_envelope_timeout_counts_from_the_last_span_not_the_first() -> None:
    # wide margins (1.4 s either way): a loaded CI machine must not flip the outcome
    provider, processor, bundles = _setup(envelope_timeout=3.0)
    tracer = provider.get_tracer("t")
    env, parent = _envelope(tracer, "c1", 2)
    _stage(tracer, "c1", parent, "a").end()
    time.sleep(1.6)
    _stage(tracer, "c1", parent, "b").end()
    time.sleep(1.6)  # 3.2 s after the first span, 1.6 s after the last
    assert processor.force_flush()
    assert bundles == []
    env.end()
    assert processor.force_flush()
    (bundle,) = bundles
    assert _rebuild(bundle)["status"] == "complete"
    provider.shutdown()


def test_an_envelope_without_its_envelope_span_waits_orphan_timeout() -> None:
    provider, processor, bundles = _setup(envelope_timeout=0.05, orphan_timeout=2.0)
    tracer = provider.get_tracer("t")
    started = time.monotonic()
    _stage(tracer, "orphan").end()
    time.sleep(0.2)  # well past envelope_timeout, well before orphan_timeout
    assert processor.force_flush()
    assert bundles == []
    _wait_for(lambda: bool(bundles))
    assert time.monotonic() - started >= 2.0
    assert _rebuild(bundles[0])["partial_reasons"] == ["no_envelope_span", "timeout"]
    provider.shutdown()


def test_max_traces_evicts_the_least_recently_active_envelope_partial() -> None:
    provider, processor, bundles = _setup(max_traces=1)
    tracer = provider.get_tracer("t")
    _stage(tracer, "first").end()  # a root span: a trace of its own
    _stage(tracer, "second").end()
    assert processor.force_flush()
    (bundle,) = bundles
    assert bundle["context_envelope"]["context_id"] == "first"
    assert _rebuild(bundle)["partial_reasons"] == ["no_envelope_span", "evicted"]
    provider.shutdown()
    assert [b["context_envelope"]["context_id"] for b in bundles] == ["first", "second"]


def test_max_spans_evicts_partial() -> None:
    provider, processor, bundles = _setup(max_spans=2)
    tracer = provider.get_tracer("t")
    env, parent = _envelope(tracer, "c1", 5)
    for name in "abc":
        _stage(tracer, "c1", parent, name).end()
    assert processor.force_flush()
    (bundle,) = bundles
    assert _rebuild(bundle)["partial_reasons"] == ["no_envelope_span", "evicted"]
    env.end()
    provider.shutdown()


def test_a_span_ended_twice_counts_once() -> None:
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    env, parent = _envelope(tracer, "c1", 2)
    stage = _stage(tracer, "c1", parent, "a")
    stage.end()
    processor.on_end(stage)  # the same span id again
    env.end()
    assert processor.force_flush()
    assert bundles == []  # still one promised span short
    _stage(tracer, "c1", parent, "b").end()
    assert processor.force_flush()
    (bundle,) = bundles
    assert _rebuild(bundle)["status"] == "complete" and _rebuild(bundle)["received_spans"] == 2
    provider.shutdown()


def test_a_span_of_another_trace_is_left_out_and_listed_as_a_repair() -> None:
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    env, parent = _envelope(tracer, "c1", 1)
    env.end()  # its trace owns the envelope
    stray = _stage(tracer, "c1", name="stray")  # a root span: another trace, same context.id
    stray.end()
    assert processor.force_flush()
    assert bundles == []  # the stray span does not stand in for the promised one
    stage = _stage(tracer, "c1", parent, "mine")
    stage.end()
    assert processor.force_flush()
    (bundle,) = bundles  # done once the promised span of its own trace is in
    assert _rebuild(bundle)["partial_reasons"] == ["repaired"]  # the repair: nothing missing
    assert _rebuild(bundle)["received_spans"] == 1
    (repair,) = _rebuild(bundle)["repairs"]
    assert repair["kind"] == "foreign_trace"
    assert repair["received"] == format(stray.get_span_context().trace_id, "032x")
    assert repair["span_id"] == format(stray.get_span_context().span_id, "016x")
    provider.shutdown()


# -- shutdown, errors, backpressure ---------------------------------------------------------------


def test_shutdown_emits_pending_envelopes_partial_once_and_ignores_later_spans() -> None:
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    _stage(tracer, "orphan").end()
    env, parent = _envelope(tracer, "open", 3)
    env.end()
    processor.shutdown()
    assert {b["context_envelope"]["context_id"]: _rebuild(b)["partial_reasons"]
            for b in bundles} == {"orphan": ["no_envelope_span", "shutdown"],
                                  "open": ["shutdown", "missing_spans"]}
    assert not processor._worker.is_alive()
    processor.shutdown()  # harmless
    provider.shutdown()
    _stage(tracer, "late").end()  # after shutdown: ignored
    assert processor.force_flush()
    assert len(bundles) == 2 and len(processor._queue) == 0


def test_a_raising_on_bundle_is_logged_and_later_bundles_still_arrive(caplog) -> None:
    seen: list[str] = []

    def on_bundle(bundle: dict) -> None:
        seen.append(bundle["context_envelope"]["context_id"])
        if len(seen) == 1:
            raise RuntimeError("callback bug")

    provider = TracerProvider()
    processor = BundleSpanProcessor(on_bundle)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.ERROR, logger="otel_agent_context"):
        for cid in ("c1", "c2"):
            _envelope(tracer, cid, 0)[0].end()
            assert processor.force_flush()
    assert seen == ["c1", "c2"]
    assert any(r.exc_info and "callback bug" in str(r.exc_info[1]) for r in caplog.records)
    _envelope(tracer, "c3", 0)[0].end()
    provider.shutdown()
    assert seen == ["c1", "c2", "c3"]


def test_a_failing_rebuild_is_logged_and_the_worker_goes_on(caplog, monkeypatch) -> None:
    from otel_agent_context.rebuild import _span_processor

    def broken(spans: Any, **kwargs: Any) -> dict:
        if any(s.attributes.get("context.id") == "bad" for s in spans):
            raise ValueError("rebuild bug")
        return rebuild_envelope(spans, **kwargs)

    monkeypatch.setattr(_span_processor, "rebuild_envelope", broken)
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.ERROR, logger="otel_agent_context"):
        _envelope(tracer, "bad", 0)[0].end()
        _envelope(tracer, "good", 0)[0].end()
        assert processor.force_flush()
    assert [b["context_envelope"]["context_id"] for b in bundles] == ["good"]
    assert any("rebuild failed" in r.getMessage() for r in caplog.records)
    provider.shutdown()


def test_force_flush_on_the_worker_thread_returns_false_at_once() -> None:
    # e.g. an on_bundle that flushes the tracer provider: the worker cannot wait for itself
    flushes: list[tuple[bool, float]] = []

    def on_bundle(bundle: dict) -> None:
        started = time.monotonic()
        flushes.append((provider.force_flush(3000), time.monotonic() - started))

    provider = TracerProvider()
    processor = BundleSpanProcessor(on_bundle)
    provider.add_span_processor(processor)
    _envelope(provider.get_tracer("t"), "c1", 0)[0].end()
    assert processor.force_flush(10_000)
    ((flushed, elapsed),) = flushes
    assert flushed is False and elapsed < 1.0
    provider.shutdown()


def test_a_forked_child_has_its_own_worker_and_starts_empty() -> None:
    provider, processor, bundles = _setup()
    tracer = provider.get_tracer("t")
    env, _ = _envelope(tracer, "parent", 1)
    env.end()  # pending in the parent: one promised span short
    assert processor.force_flush()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns about fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            _envelope(tracer, "child", 0)[0].end()
            flushed = processor.force_flush(5000)
            processor.shutdown()
            report = {"flushed": flushed,
                      "ids": [b["context_envelope"]["context_id"] for b in bundles]}
            os.write(write_end, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read() or b"null")
    os.waitpid(pid, 0)
    assert report == {"flushed": True, "ids": ["child"]}
    provider.shutdown()  # the parent still has its own pending envelope, and only it
    assert [(b["context_envelope"]["context_id"], _rebuild(b)["partial_reasons"])
            for b in bundles] == [("parent", ["shutdown", "missing_spans"])]


def test_a_full_queue_drops_and_counts_without_blocking(caplog) -> None:
    entered, release = threading.Event(), threading.Event()
    bundles: list[dict] = []

    def on_bundle(bundle: dict) -> None:
        entered.set()
        release.wait()  # the worker is stuck: nothing leaves the queue
        bundles.append(bundle)

    provider = TracerProvider()
    processor = BundleSpanProcessor(on_bundle, max_queue_size=3)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    _envelope(tracer, "first", 0)[0].end()
    assert entered.wait(5)
    timer = threading.Timer(5.0, release.set)  # unblocks a blocking on_end, to fail, not hang
    timer.start()
    with caplog.at_level(logging.WARNING, logger="otel_agent_context"):
        started = time.monotonic()
        for i in range(10):
            _stage(tracer, f"o{i}").end()
        elapsed = time.monotonic() - started
    assert elapsed < 1.0
    assert processor.dropped_spans == 7
    warnings = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    release.set()
    timer.cancel()
    provider.shutdown()
    assert [b["context_envelope"]["context_id"] for b in bundles] == ["first", "o0", "o1", "o2"]


# -- one engine: the same bundles as the processor service's ---------------------------------


def _processor_bundles(spans: list[ReadableSpan]) -> list[dict]:
    """The processor service's path: OTLP bytes, decode, its buffer, its rebuild."""
    # its defaults, but not its default directories in the working directory
    with tempfile.TemporaryDirectory() as out:
        config = ProcessorConfig.from_values({"output.dir": out})
    buffer = TraceBuffer(envelope_timeout=config.envelope_timeout,
                         orphan_timeout=config.orphan_timeout, max_traces=config.max_traces,
                         max_spans=config.max_spans, dedupe_window=config.dedupe_window,
                         dedupe_max=config.dedupe_max)
    finished: list[Finished] = []
    for span in spans:  # one request per span: the arrival order is the end order
        for accepted in decode_request(encode_spans([span]).SerializeToString()).accepted:
            buffer.add(accepted, None, finished)
    finished.extend(buffer.drain(REASON_SHUTDOWN))
    return [rebuild_envelope(f.spans, partial_reasons=f.reasons, repairs=f.repairs)
            for f in finished]


def _by_context(bundles: list[dict]) -> dict[str, Any]:
    return {b["context_envelope"]["context_id"]: orjson.loads(orjson.dumps(b)) for b in bundles}


def test_the_same_spans_give_the_same_bundles_as_the_processor_service() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    ids = run_demo(provider, turns=3, seed=5)
    env, parent = _envelope(tracer, "open", 3)
    _stage(tracer, "open", parent, "a").end()
    _stage(tracer, "open", name="stray").end()  # another trace: left out, a repair
    tracer.start_span("context.selection", parent, attributes={
        "context.id": "open", "context.selection.id": "b",
        "context.selection.selected_count": "2"}).end()  # repaired by the boundary
    env.end()
    _stage(tracer, "orphan").end()
    spans = list(memory.get_finished_spans())

    bundles: list[dict] = []
    processor = BundleSpanProcessor(bundles.append)
    for span in spans:
        processor.on_end(span)
    processor.shutdown()

    ours, theirs = _by_context(bundles), _by_context(_processor_bundles(spans))
    assert ours.keys() == {*ids, "open", "orphan"}
    assert ours == theirs
    assert all(ours[cid]["rebuild"]["status"] == "complete" for cid in ids)
    assert {r["kind"] for r in ours["open"]["rebuild"]["repairs"]} >= {"foreign_trace"}


def test_the_completion_engine_does_not_import_the_processor_service() -> None:
    code = ("import sys, otel_agent_context.rebuild._completion; "
            "print(sorted(m for m in sys.modules if m.startswith("
            "('grpc', 'google.protobuf', 'otel_agent_context.processor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_example_agent_prints_a_complete_bundle() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "support_agent.py")],
                         capture_output=True, text=True, timeout=60, check=True)
    bundle = json.loads(out.stdout)
    assert bundle["rebuild"]["status"] == "complete"
    assert {o["reason"] for o in bundle["context_selections"][0]["omitted_item_refs"]} == {
        "stale_source", "low_relevance"}
    assert bundle["missing_context"][0]["severity"] == "blocking"
    assert bundle["context_budgets"][0]["truncation_records"][0]["item_id"] == "msg:2"
    assert not any("content" in item for item in bundle["context_items"])  # capture off


def test_text_json_cannot_carry_is_repaired_and_the_other_envelopes_still_written(
        tmp_path) -> None:
    # A lone surrogate (a bad decode upstream in the application): JSON cannot carry it and
    # orjson refuses it. The envelope is written anyway, repaired and said, and valid.
    path = tmp_path / "bundles.jsonl"
    provider = TracerProvider()
    processor = BundleSpanProcessor(path=path)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for cid, agent in (("ctx-ok-1", "agent"), ("ctx-bad", "agent-\ud800"), ("ctx-ok-2", "a")):
        env, _ = _envelope(tracer, cid, 0)
        env.set_attribute("gen_ai.agent.name", agent)
        env.end()
    assert processor.force_flush()
    lines = path.read_bytes().splitlines()
    found = {b["context_envelope"]["context_id"]: b for b in map(orjson.loads, lines)}
    assert set(found) == {"ctx-ok-1", "ctx-bad", "ctx-ok-2"}
    bad = found["ctx-bad"]["rebuild"]
    assert bad["status"] == "partial" and "repaired" in bad["partial_reasons"]
    assert [r["kind"] for r in bad["repairs"]] == ["text"]
    assert "\ufffd" in orjson.dumps(found["ctx-bad"]).decode()
    jsonschema.validate(found["ctx-bad"], bundle_json_schema())
    assert found["ctx-ok-1"]["rebuild"]["status"] == "complete"
    provider.shutdown()


def _log_mode_turn(tracer_provider: Any, logger_provider: Any) -> None:
    ac = AgentContext(tracer_provider=tracer_provider, logger_provider=logger_provider,
                      events_as="logs" if logger_provider is not None else "span_events")
    with ac.envelope(agent_name="agent", context_id="ctx-logs") as env:
        with env.selection() as selection:
            selection.selected("doc-1", rank=1, score=0.5)
            selection.omitted("doc-2", reason="budget")
        with env.budget(max_tokens=100) as budget:
            budget.segment("message_history", order=0, used_tokens=10)
        env.missing(question="Which order?", needed_for="refund")


def _comparable(value: Any) -> Any:
    """What does not depend on the run: the records without generated ids and times."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()
                if k not in ("context_envelope", "context_events", "rebuild")
                and not (k.endswith(("_id", "_at")) and k != "item_id")}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def test_log_based_events_join_their_spans_in_process() -> None:
    from opentelemetry.sdk._logs import LoggerProvider

    reference: list[dict] = []
    provider = TracerProvider()
    bsp = BundleSpanProcessor(reference.append)
    provider.add_span_processor(bsp)
    _log_mode_turn(provider, None)
    assert bsp.force_flush()

    found: list[dict] = []
    provider = TracerProvider()
    bsp = BundleSpanProcessor(found.append)
    provider.add_span_processor(bsp)
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(bsp.log_record_processor)
    _log_mode_turn(provider, logger_provider)
    assert bsp.force_flush()
    (bundle,) = found
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    assert _comparable(bundle) == _comparable(reference[0])
    assert bundle["context_selections"][0]["omitted_item_refs"] == [
        {"item_id": "doc-2", "reason": "budget"}]
    assert len(bundle["context_events"]) == len(reference[0]["context_events"])
    jsonschema.validate(bundle, bundle_json_schema())
    provider.shutdown()
    logger_provider.shutdown()


def test_without_the_log_processor_a_log_mode_envelope_says_what_it_lacks() -> None:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    found: list[dict] = []
    provider = TracerProvider()
    bsp = BundleSpanProcessor(found.append, envelope_timeout=0.2)
    provider.add_span_processor(bsp)
    logger_provider = LoggerProvider()  # records go elsewhere, not to the bsp
    logger_provider.add_log_record_processor(
        SimpleLogRecordProcessor(InMemoryLogRecordExporter()))
    _log_mode_turn(provider, logger_provider)
    _wait_for(lambda: bool(found) or not bsp.force_flush())
    (bundle,) = found
    assert "missing_events" in bundle["rebuild"]["partial_reasons"]
    provider.shutdown()


def test_identical_log_based_events_in_process_are_all_kept() -> None:
    # Two calls with the same explicit time and values (a replay, a coarse framework clock)
    # are two events: the SDK hands each record over once, so in process no record is a
    # retry. Span-event mode keeps both; log mode must too, and come out complete at once.
    from opentelemetry.sdk._logs import LoggerProvider

    t = 1_700_000_000_000_000_000

    def turn(tracer_provider: Any, logger_provider: Any) -> None:
        ac = AgentContext(tracer_provider=tracer_provider, logger_provider=logger_provider,
                          events_as="logs" if logger_provider is not None else "span_events")
        with ac.envelope(agent_name="agent", context_id="ctx-twins") as env:
            with env.budget(max_tokens=100) as budget:
                for _ in range(2):
                    budget.truncated(item_id="i1", tokens_before=50, tokens_after=10,
                                     timestamp=t)
                    budget.segment("history", used_tokens=10, timestamp=t)
            with env.selection() as selection:
                for _ in range(2):
                    selection.selected("d", rank=1, timestamp=t)

    found: dict[str, list[dict]] = {"spans": [], "logs": []}
    for mode in found:
        provider = TracerProvider()
        bsp = BundleSpanProcessor(found[mode].append)
        provider.add_span_processor(bsp)
        logger_provider = None
        if mode == "logs":
            logger_provider = LoggerProvider()
            logger_provider.add_log_record_processor(bsp.log_record_processor)
        turn(provider, logger_provider)
        assert bsp.force_flush()
        provider.shutdown()
    (spans,) = found["spans"]
    (logs,) = found["logs"]  # complete: emitted by force_flush, no timeout waited for
    assert len(spans["context_budgets"][0]["truncation_records"]) == 2
    assert logs["rebuild"]["status"] == "complete", logs["rebuild"]
    assert _comparable(logs) == _comparable(spans)
