"""Contract metrics stay bounded and finite whatever the senders send: a label takes at
most ``metrics.label_values`` distinct values (the rest count as ``other``, counted), and a
histogram's sum never becomes infinite."""

from __future__ import annotations

import math
import urllib.request

from processor_testkit import envelope_spans, request, wait_for
from prometheus_client.parser import text_string_to_metric_families

from otel_agent_context import _semconv as S
from otel_agent_context._measure import Measurement
from otel_agent_context.processor._metrics import MetricsRegistry


def _families(registry: MetricsRegistry) -> dict[str, list]:
    body, _ = registry.render(None)
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_a_label_past_its_limit_counts_as_other_and_says_so() -> None:
    registry = MetricsRegistry(label_values=3)
    registry.record([Measurement(S.METRIC_ENVELOPES, ("turn", f"agent-{i}", "complete"), 1.0)
                     for i in range(5)])
    registry.record([Measurement(S.METRIC_ENVELOPES, ("turn", "agent-0", "complete"), 1.0)])
    families = _families(registry)
    agents = {s.labels["agent"]: s.value for s in families["context_envelopes"]
              if s.name == "context_envelopes_total"}
    assert agents == {"agent-0": 2.0, "agent-1": 1.0, "agent-2": 1.0, "other": 2.0}
    (overflow,) = [s for s in families["context_processor_metric_label_overflow"]
                   if s.name.endswith("_total")]
    assert overflow.labels == {"metric": "context_envelopes_total", "label": "agent"}
    assert overflow.value == 2.0


def test_a_histogram_sum_stays_finite() -> None:
    registry = MetricsRegistry()
    big = 1.7e308
    registry.record([Measurement(S.METRIC_BUDGET_UTILIZATION, ("model", "a"), big, None),
                     Measurement(S.METRIC_BUDGET_UTILIZATION, ("model", "a"), big, None),
                     Measurement(S.METRIC_BUDGET_UTILIZATION, ("model", "a"), 0.5, None)])
    samples = _families(registry)["context_budget_utilization_ratio"]
    (total,) = [s.value for s in samples if s.name.endswith("_sum")]
    (count,) = [s.value for s in samples if s.name.endswith("_count")]
    assert math.isfinite(total) and count == 2.0
    (dropped,) = [s.value for s in _families(registry)["context_processor_measurements_dropped"]
                  if s.name.endswith("_total")]
    assert dropped == 1.0


def test_serve_caps_agent_names_from_the_wire(start_processor) -> None:
    processor = start_processor(**{"metrics.label_values": 2,
                                   "metrics.endpoint": "127.0.0.1:0"})
    for i in range(4):
        body = request(envelope_spans(50 + i, f"cap-{i}", stages=1, agent=f"agent-{i}"))
        req = urllib.request.Request(
            f"http://{processor.addresses['otlp_http']}/v1/traces",
            data=body.SerializeToString(), method="POST",
            headers={"Content-Type": "application/x-protobuf"})
        urllib.request.urlopen(req, timeout=10).close()

    def agents() -> set[str]:
        with urllib.request.urlopen(f"http://{processor.addresses['metrics']}/metrics",
                                    timeout=10) as response:
            text = response.read().decode()
        return {s.labels["agent"] for f in text_string_to_metric_families(text)
                if f.name == "context_envelopes" for s in f.samples}

    wait_for(lambda: len(agents()) == 3)
    assert agents() == {"agent-0", "agent-1", "other"}
