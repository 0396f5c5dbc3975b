"""What ``BundleSpanProcessor.on_end`` costs the application's thread, per span.

    python benchmarks/span_processor_bench.py [--calls 20000] [--rounds 7]

The spans are the demo agent's (``otel_agent_context._demo_agent``), recorded into an
in-memory exporter first. Cases, each timed with ``timeit`` (median over rounds, ns a call):

- ``stage span``: a context span that is not an envelope span (most of them);
- ``envelope span``: the span that completes its envelope (the old in-line processor
  rebuilt and wrote the bundle here); the envelope's other spans go in untimed, so each
  call is timed alone (``perf_counter_ns``, median of the round's calls);
- ``plain span``: a span without ``context.id`` (ignored);
- ``BatchSpanProcessor (reference)``: the SDK's own ``on_end`` on the stage span, in the
  same round (it never exports while timed).

The worker is kept busy in a blocking ``on_bundle`` while ``on_end`` is timed, so the
numbers are ``on_end`` alone, not the GIL shared with a worker; the queue is made large
enough that nothing is dropped. Run it against another checkout with ``PYTHONPATH``: a
processor without a worker (no ``max_queue_size``) is timed as it is.
"""

from __future__ import annotations

import argparse
import inspect
import platform
import statistics
import threading
import time
import timeit
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_context._demo_agent import run_demo
from otel_agent_context.rebuild import BundleSpanProcessor


def _spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_demo(provider, turns=1, seed=1)
    return list(memory.get_finished_spans())


def _processor(calls: int) -> tuple[BundleSpanProcessor, threading.Event]:
    release = threading.Event()
    kwargs: dict[str, Any] = {"envelope_timeout": 3600.0}
    parameters = inspect.signature(BundleSpanProcessor).parameters
    if "max_queue_size" in parameters:
        kwargs["max_queue_size"] = 10 * calls + 10_000
    if "orphan_timeout" in parameters:
        kwargs["orphan_timeout"] = 3600.0

    def on_bundle(bundle: dict[str, Any]) -> None:
        if bundle["context_envelope"]["context_id"] == "blocker":
            release.wait()

    processor = BundleSpanProcessor(on_bundle, **kwargs)
    return processor, release


def _block_worker(processor: BundleSpanProcessor, envelope: ReadableSpan) -> None:
    """Park the worker in on_bundle (a processor without a worker is left as it is)."""
    if hasattr(processor, "_worker"):
        single = _copy(envelope, span_count=0, context_id="blocker")
        processor.on_end(single)
        deadline = 1000
        while processor._queue and deadline:  # the worker took it and is in on_bundle
            deadline -= 1
            threading.Event().wait(0.01)


def _copy(span: ReadableSpan, **changes: Any) -> ReadableSpan:
    attributes = dict(span.attributes or {})
    if "span_count" in changes:
        attributes["context.span_count"] = changes["span_count"]
    if "context_id" in changes:
        attributes["context.id"] = changes["context_id"]
    return ReadableSpan(name=span.name, context=span.context, parent=span.parent,
                        resource=span.resource, attributes=attributes, events=span.events,
                        links=span.links, kind=span.kind, status=span.status,
                        start_time=span.start_time, end_time=span.end_time,
                        instrumentation_scope=span.instrumentation_scope)


def _per_call(on_end: Callable[[ReadableSpan], None], span: ReadableSpan, calls: int) -> float:
    return timeit.timeit(lambda: on_end(span), number=calls) / calls * 1e9


def _closing_envelopes(processor: BundleSpanProcessor, stages: list[ReadableSpan],
                       envelope: ReadableSpan, count: int) -> float:
    """ns an on_end of an envelope span that completes its envelope (stage spans untimed)."""
    times = []
    for i in range(count):
        cid = f"env-{i}"
        for stage in stages:
            processor.on_end(_copy(stage, context_id=cid))
        closing = _copy(envelope, context_id=cid)
        started = time.perf_counter_ns()
        processor.on_end(closing)
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times)


def _batch_span_processor(calls: int) -> BatchSpanProcessor:
    # Never exports while timed: the batch is the whole queue and the delay an hour.
    size = 10 * calls + 10_000
    return BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=size,
                              max_export_batch_size=size, schedule_delay_millis=3_600_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    spans = _spans()
    context_spans = [s for s in spans if "context.id" in (s.attributes or {})]
    envelope = next(s for s in context_spans if "context.scope" in (s.attributes or {}))
    stages = [s for s in context_spans if s is not envelope]
    plain = next(s for s in spans if "context.id" not in (s.attributes or {}))
    print(f"python {platform.python_version()}, opentelemetry-sdk {version('opentelemetry-sdk')}"
          f"; demo turn: {len(stages)} stage spans, "
          f"{sum(len(s.events) for s in context_spans)} events")

    results: dict[str, list[float]] = {
        "stage span": [], "envelope span": [], "plain span": [],
        "BatchSpanProcessor (reference)": []}
    for _ in range(args.rounds):
        processor, release = _processor(args.calls)
        _block_worker(processor, envelope)
        reference = _batch_span_processor(args.calls)
        results["stage span"].append(_per_call(processor.on_end, stages[0], args.calls))
        results["BatchSpanProcessor (reference)"].append(
            _per_call(reference.on_end, stages[0], args.calls))
        results["plain span"].append(_per_call(processor.on_end, plain, args.calls))
        results["envelope span"].append(
            _closing_envelopes(processor, stages, envelope, max(1, args.calls // 100)))
        release.set()
        processor.shutdown()
        reference.shutdown()
    for name, values in results.items():
        print(f"{name:>30}: {statistics.median(values):>10,.0f} ns per on_end")


if __name__ == "__main__":
    main()
