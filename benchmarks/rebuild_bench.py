"""Rebuild per event: spans of a typical turn back to its bundle, against a naive walk.

    python benchmarks/rebuild_bench.py [--turns 100] [--rounds 7]

The turn is ``api_bench.py``'s (150 stage calls, 6 context spans, 136 span events),
recorded through the API into an in-memory exporter; its spans become span views outside
the timed region. Variants, interleaved in every round, per event:

- ``boundary+rebuild``: what the in-process ``BundleSpanProcessor`` does per envelope: the
  boundary (every attribute checked against the table) then ``rebuild_envelope``;
- ``rebuild``: the same on views the boundary has already checked (what the processor
  service does after decoding: its decode checks attributes on the way, cached);
- ``boundary``: the boundary alone;
- ``naive walk``: a minimal reader of the same views: every span's attributes and every
  event's attributes copied into JSON-ready dicts, grouped by ``context.id``.

Prints medians over rounds, in µs per event, and the ratio to the naive walk.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_bench import _items, turn_api  # noqa: E402

from otel_agent_context import AgentContext  # noqa: E402
from otel_agent_context.rebuild import group_by_context, rebuild_envelope  # noqa: E402
from otel_agent_context.rebuild._boundary import normalize_view  # noqa: E402
from otel_agent_context.rebuild._view import SpanView, view_from_readable_span  # noqa: E402


def record(turns: int) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = AgentContext(tracer_provider=provider, capture_content=False)
    tracer = provider.get_tracer("bench")
    items = _items()
    for _ in range(turns):
        turn_api(ctx, items, tracer)
    return list(exporter.get_finished_spans())


def naive_walk(groups: list[list[SpanView]]) -> int:
    out = []
    for spans in groups:
        out.append({"spans": [{"trace_id": s.trace_id, "span_id": s.span_id, "name": s.name,
                               "attributes": dict(s.attributes),
                               "events": [{"name": e.name, "time": e.time_unix_nano,
                                           "attributes": dict(e.attributes)}
                                          for e in s.events]} for s in spans]})
    return len(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    readable = record(args.turns)

    def fresh() -> list[list[SpanView]]:
        views = [view_from_readable_span(s) for s in readable]
        return list(group_by_context(views).values())

    events = sum(len(s.events) for s in readable)
    times: dict[str, list[float]] = {k: [] for k in
                                     ("boundary+rebuild", "rebuild", "boundary", "naive walk")}
    for _ in range(args.rounds):
        for name in times:
            groups = fresh()
            if name == "rebuild":
                for spans in groups:
                    for span in spans:
                        normalize_view(span)
            gc.collect()
            start = time.perf_counter()
            if name == "naive walk":
                naive_walk(groups)
            elif name == "boundary":
                for spans in groups:
                    for span in spans:
                        normalize_view(span)
            else:
                for spans in groups:
                    rebuild_envelope(spans)
            times[name].append((time.perf_counter() - start) / events * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, "
          f"opentelemetry-sdk {version('opentelemetry-sdk')}; {args.turns} turns, "
          f"{events} events, {args.rounds} rounds")
    print("| variant | µs per event | vs naive walk |")
    print("|---|---:|---:|")
    for name, value in med.items():
        print(f"| {name} | {value:.2f} | {value / med['naive walk']:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
