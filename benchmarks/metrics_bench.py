"""Time to scrape the processor's ``/metrics`` with every free-form label at its limit.

    python benchmarks/metrics_bench.py [--label-values 1000] [--scrapes 20]

The demo agent's bundles are rebuilt in process (``run_demo`` into a ``BundleSpanProcessor``)
and measured once for each of ``--label-values`` agent names (the agent label is free-form;
the enum labels are bounded by the boundary), so every contract metric holds its series at
the cap. Then the registry renders the Prometheus text and the OpenMetrics exposition
(exemplars included) ``--scrapes`` times each, interleaved; medians are printed with the
series count. Goal (issue 13): under 100 ms a scrape at the limit.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from importlib.metadata import version

from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context._demo_agent import run_demo
from otel_agent_context._measure import measure
from otel_agent_context.processor._metrics import MetricsRegistry
from otel_agent_context.rebuild import BundleSpanProcessor


def _bundles() -> list[dict]:
    found: list[dict] = []
    provider = TracerProvider()
    provider.add_span_processor(BundleSpanProcessor(found.append))
    run_demo(tracer_provider=provider)
    provider.shutdown()
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label-values", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args(argv)
    registry = MetricsRegistry(label_values=args.label_values)
    bundles = _bundles()
    for i in range(args.label_values):
        for bundle in bundles:
            bundle["context_envelope"].setdefault("metadata", {})["gen_ai.agent.name"] = \
                f"agent-{i:05d}"
            registry.record(measure(bundle))
    text_ms, open_ms = [], []
    size = {}
    for _ in range(args.scrapes):
        for accept, out in ((None, text_ms),
                            ("application/openmetrics-text; version=1.0.0", open_ms)):
            start = time.perf_counter()
            body, _ = registry.render(accept)
            out.append((time.perf_counter() - start) * 1000)
            size[accept] = body
    series = sum(1 for line in size[None].splitlines() if line and not line.startswith(b"#"))
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, "
          f"prometheus_client {version('prometheus_client')}")
    print(f"label values per label: {args.label_values}; samples in the text exposition: "
          f"{series:,}; body {len(size[None]) / 1024:.0f} KiB")
    print(f"  text/plain    median {statistics.median(text_ms):7.1f} ms  "
          f"(min {min(text_ms):.1f}, max {max(text_ms):.1f})")
    print(f"  OpenMetrics   median {statistics.median(open_ms):7.1f} ms  "
          f"(min {min(open_ms):.1f}, max {max(open_ms):.1f})")
    print("  goal: under 100 ms a scrape")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
