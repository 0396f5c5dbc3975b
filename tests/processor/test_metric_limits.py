"""Contract metrics stay bounded and finite whatever the senders send: a label takes at
most ``metrics.label_values`` distinct values (the rest count as ``other``, counted), and a
histogram's sum never becomes infinite."""

from __future__ import annotations

import math
import urllib.request
from typing import Any

from processor_testkit import envelope_spans, request, wait_for
from prometheus_client.parser import text_string_to_metric_families

from otel_agent_context import _semconv as S
from otel_agent_context._measure import Measurement
from otel_agent_context.processor._metrics import MetricsRegistry, runs


def _families(registry: MetricsRegistry) -> dict[str, list]:
    body, _ = registry.render(None)
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_runs_join_only_neighbours_of_equal_name_and_labels() -> None:
    """Runs are what the label limit and the series lookup see once: neighbours with equal
    (not necessarily the same) name and labels, in order; a later repeat is a run again."""
    util, envelopes = S.METRIC_BUDGET_UTILIZATION, S.METRIC_ENVELOPES
    a = Measurement(util, ("model", "agent"), 0.5, "t1")
    b = Measurement(util, tuple(["model", "agent"]), 0.6, "t2")  # equal labels, another tuple
    c = Measurement(envelopes, ("turn", "agent", "complete"), 1.0)
    d = Measurement(util, ("model", "other"), 0.7)
    e = Measurement(envelopes, ("model", "agent"), 1.0)  # a's labels under another name
    assert list(runs([a, b, c, a, d, e])) == [
        (util, a.labels, [a, b]), (envelopes, c.labels, [c]), (util, a.labels, [a]),
        (util, d.labels, [d]), (envelopes, e.labels, [e])]
    assert list(runs([])) == []
    registry = MetricsRegistry()
    registry.record([a, b, c, a, d, e])
    budget = {(s.labels["target"], s.labels["agent"]): s.value for s in _families(registry)[
        "context_budget_utilization_ratio"] if s.name.endswith("_count")}
    assert budget == {("model", "agent"): 3.0, ("model", "other"): 1.0}


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


def test_a_long_label_value_is_cut_and_distinct_ones_stay_distinct() -> None:
    registry = MetricsRegistry(label_values=3)
    first, second = "a" * 1_000_000, "a" * 999_999 + "b"  # the same start
    registry.record([Measurement(S.METRIC_ENVELOPES, ("turn", name, "complete"), 1.0)
                     for name in (first, second, first, "short")])
    body, _ = registry.render(None)
    assert len(body) < 20_000  # was over 2 MB: each value copied whole into the exposition
    families = _families(registry)
    agents = {s.labels["agent"]: s.value for s in families["context_envelopes"]
              if s.name == "context_envelopes_total"}
    assert len(agents) == 3 and agents["short"] == 1.0
    cut = sorted(a for a in agents if a != "short")
    assert all(len(a) == 128 and a.startswith("a" * 111 + "~") for a in cut)
    assert sorted(agents[a] for a in cut) == [1.0, 2.0]  # the first counted twice
    (truncated,) = [s for s in families["context_processor_metric_label_truncated"]
                    if s.name.endswith("_total")]
    assert truncated.labels == {"metric": "context_envelopes_total", "label": "agent"}
    assert truncated.value == 3.0
    # the cut values count towards the distinct limit as any other
    registry.record([Measurement(S.METRIC_ENVELOPES, ("turn", "z" * 200, "complete"), 1.0)])
    agents = {s.labels["agent"] for s in _families(registry)["context_envelopes"]
              if s.name == "context_envelopes_total"}
    assert "other" in agents


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


def test_serve_cuts_a_megabyte_agent_name_from_the_wire(start_processor) -> None:
    processor = start_processor(**{"metrics.endpoint": "127.0.0.1:0"})
    for i in range(3):
        body = request(envelope_spans(60 + i, f"long-{i}", stages=1,
                                      agent=f"{i}" + "x" * 1_000_000))
        req = urllib.request.Request(
            f"http://{processor.addresses['otlp_http']}/v1/traces",
            data=body.SerializeToString(), method="POST",
            headers={"Content-Type": "application/x-protobuf"})
        urllib.request.urlopen(req, timeout=10).close()

    def scrape() -> str:
        with urllib.request.urlopen(f"http://{processor.addresses['metrics']}/metrics",
                                    timeout=10) as response:
            return response.read().decode()

    wait_for(lambda: "context_processor_metric_label_truncated_total{" in scrape())
    wait_for(lambda: len({s.labels["agent"] for f in text_string_to_metric_families(scrape())
                          if f.name == "context_envelopes" for s in f.samples}) == 3)
    text = scrape()
    assert len(text) < 200_000  # over 3 MB a scrape before
    agents = {s.labels["agent"] for f in text_string_to_metric_families(text)
              if f.name == "context_envelopes" for s in f.samples}
    assert {len(a) for a in agents} == {128}


NON_FINITE = (math.nan, math.inf, -math.inf)


class _Pushed:
    """Stands in for the OTLP metrics push: what it would send."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def record(self, measurements: Any) -> None:
        self.values.extend(m.value for m in measurements)


def _histogram(families: dict[str, list], family: str) -> tuple[float, float]:
    (total,) = [s.value for s in families[family] if s.name.endswith("_sum")]
    (count,) = [s.value for s in families[family] if s.name.endswith("_count")]
    return total, count


def test_non_finite_values_recorded_directly_are_left_out_and_counted() -> None:
    registry = MetricsRegistry()
    pushed = registry.push = _Pushed()  # type: ignore[assignment]
    for value in (*NON_FINITE, 0.5):
        registry.record([
            Measurement(S.METRIC_BUDGET_UTILIZATION, ("model", "a"), value, "ab" * 16),
            Measurement(S.METRIC_COMPACTION_COVERAGE, ("a", "rolling_summary"), value, None),
            Measurement(S.METRIC_ENVELOPES, ("turn", "a", "complete"), value, None),
        ])
    families = _families(registry)
    assert _histogram(families, "context_budget_utilization_ratio") == (0.5, 1.0)
    assert _histogram(families, "context_compaction_coverage_ratio") == (0.5, 1.0)
    (envelopes,) = [s.value for s in families["context_envelopes"]
                    if s.name == "context_envelopes_total"]
    assert envelopes == 0.5  # a counter is not made NaN or infinite either
    (dropped,) = [s.value for s in families["context_processor_measurements_dropped"]
                  if s.name.endswith("_total")]
    assert dropped == 3 * len(NON_FINITE)
    assert pushed.values and all(math.isfinite(v) for v in pushed.values)  # nor pushed


def test_non_finite_ratios_sent_over_grpc_stay_out_of_the_histograms(start_processor) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
    from processor_testkit import span

    processor = start_processor()
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    for trace, value in enumerate((*NON_FINITE, 0.25), start=1):
        root, cid = trace * 10, f"ratios-{trace}"
        stub.Export(request([
            span(trace, root, "invoke_agent raw-agent", {
                "context.id": cid, "context.scope": "turn", "context.span_count": 2,
                "gen_ai.agent.name": "raw-agent", "gen_ai.operation.name": "invoke_agent"}),
            span(trace, root + 1, "context.budget", {
                "context.id": cid, "context.budget.id": f"{cid}-b",
                "context.budget.target": "model", "context.budget.utilization": value},
                parent=root),
            span(trace, root + 2, "context.compaction", {
                "context.id": cid, "context.compaction.id": f"{cid}-c",
                "context.compaction.method": "rolling_summary",
                "context.compaction.coverage": value, "context.compaction.source_count": 1},
                parent=root),
        ]), timeout=10)

    def scrape() -> dict[str, list]:
        with urllib.request.urlopen(f"http://{processor.addresses['metrics']}/metrics",
                                    timeout=10) as response:
            text = response.read().decode()
        return {f.name: f.samples for f in text_string_to_metric_families(text)}

    def envelopes() -> float:
        return sum(s.value for s in scrape().get("context_envelopes", ())
                   if s.name == "context_envelopes_total")

    wait_for(lambda: envelopes() == 4, message="4 envelopes in /metrics")
    families = scrape()
    # only the finite envelope's ratios are counted: the others were dropped at the boundary
    assert _histogram(families, "context_budget_utilization_ratio") == (0.25, 1.0)
    assert _histogram(families, "context_compaction_coverage_ratio") == (0.25, 1.0)
    assert processor.metrics.self.get("context_processor_repairs_total", ("non_finite",)) == 6


def _exposition(registry: MetricsRegistry) -> str:
    body, _ = registry.render("application/openmetrics-text; version=1.0.0")
    # exemplars kept (trace id, value), their time left out
    return "\n".join(line.rpartition(" ")[0] if " # {" in line else line
                     for line in body.decode().splitlines() if "envelope_latency" not in line)


def test_a_batch_recorded_at_once_counts_as_its_measurements_one_by_one() -> None:
    # The registry takes a batch as runs of one name and labels (an envelope's budgets):
    # label limits, drops, sums and exemplars must come out as if each measurement came
    # alone, in order, whatever the runs.
    huge = 1.5e308
    budgets = [Measurement(S.METRIC_BUDGET_UTILIZATION, ("model", "a"), value, f"{i:032x}")
               for i, value in enumerate((0.5, huge, huge, 0.25, 0.1 + 0.2, 0.3))]
    batch = [
        *budgets,
        # a counter run whose every value overflows on a new series: no series appears
        Measurement(S.METRIC_TRUNCATED_TOKENS, ("model", "b"), math.inf),
        Measurement(S.METRIC_TRUNCATED_TOKENS, ("model", "b"), math.inf),
        # a run that overflows half way
        Measurement(S.METRIC_OMITTED_TOKENS, ("a", "budget"), huge),
        Measurement(S.METRIC_OMITTED_TOKENS, ("a", "budget"), huge),
        Measurement(S.METRIC_OMITTED_TOKENS, ("a", "budget"), 1.0),
        # runs past the label limit, and with a value cut for length
        *[Measurement(S.METRIC_ENVELOPES, ("turn", f"agent-{i // 2}", "complete"), 1.0)
          for i in range(8)],
        *[Measurement(S.METRIC_ENVELOPES, ("turn", "x" * 300, "complete"), 1.0)] * 3,
        *budgets[:2],
    ]
    one_by_one, at_once = MetricsRegistry(label_values=3), MetricsRegistry(label_values=3)
    for m in batch:
        one_by_one.record([m])
    at_once.record(batch)
    assert _exposition(at_once) == _exposition(one_by_one)
    families = _families(at_once)
    assert "context_truncated_tokens_total" not in {
        s.name for s in families["context_truncated_tokens"]}
    (omitted,) = [s for s in families["context_omitted_tokens"] if s.name.endswith("_total")]
    assert omitted.value == huge + 1.0
    sums = {s.name: s.value for s in families["context_budget_utilization_ratio"]
            if not s.name.endswith("_bucket")}
    assert sums["context_budget_utilization_ratio_count"] == 6  # 8 sent, two past +Inf
    assert sums["context_budget_utilization_ratio_sum"] == (
        0.5 + huge + 0.25 + (0.1 + 0.2) + 0.3 + 0.5)
    dropped = at_once.self.get("context_processor_measurements_dropped_total")
    assert dropped == one_by_one.self.get("context_processor_measurements_dropped_total") == 5
    overflow = at_once.self.get("context_processor_metric_label_overflow_total",
                                ("context_envelopes_total", "agent"))
    assert overflow == 2 + 3  # agent-3's two, the long one's three
    assert at_once.self.get("context_processor_metric_label_truncated_total",
                            ("context_envelopes_total", "agent")) == 3
