"""The agent-side instruments are the table's (``_table.METRICS``, from semconv/registry.yaml):
every metric, with its instrument kind, unit, description, buckets and labels."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import Histogram, Sum

from otel_agent_context import ContextItem
from otel_agent_context._table import METRICS
from otel_agent_context.testing import CapturedTelemetry


def _turn_that_records_every_metric(tel: CapturedTelemetry) -> None:
    doc = ContextItem(item_id="doc-1", context_kind="document_excerpt", token_estimate=40)
    old = ContextItem(item_id="doc-2", context_kind="document_excerpt", token_estimate=60)
    unused = ContextItem(item_id="doc-3", context_kind="document_excerpt", token_estimate=5,
                         content="A document the turn selected and never put in a prompt.")
    with tel.agent_context.envelope(agent_name="support") as env:
        with env.selection() as sel:
            sel.selected(doc, rank=1, score=0.9)
            sel.selected(unused, rank=2)  # no block names it: selected, never injected
            sel.omitted(old, reason="stale_source")
        with env.budget(max_tokens=100, overflow_strategy="truncate_middle") as bud:
            bud.truncated(item_id="doc-1", tokens_before=40, tokens_after=20)
            bud.actual(tokens=120)
        with env.compaction(trigger="budget") as comp:
            comp.source(doc, covered=True)
            comp.source(old, covered=False)
            comp.summary(token_estimate=10)
            comp.loss_note("the refund limit")
        with env.assembly() as asm:
            asm.block(doc, injection_point="system_prompt")
        asm.inject()
        gap = env.missing(severity="blocking")
        env.missing_resolved(gap)


def test_every_metric_of_the_table_with_its_unit_description_buckets_and_labels() -> None:
    tel = CapturedTelemetry()
    try:
        _turn_that_records_every_metric(tel)
        data = tel.metric_reader.get_metrics_data()
        assert data is not None
        recorded = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
                    for m in sm.metrics}
        assert set(recorded) == set(METRICS)
        for name, spec in METRICS.items():
            metric = recorded[name]
            assert (metric.unit, metric.description) == (spec.unit, spec.description), name
            labels = {label for label, _ in spec.labels}
            if spec.instrument == "histogram":
                assert isinstance(metric.data, Histogram), name
                for point in metric.data.data_points:
                    assert tuple(point.explicit_bounds) == spec.buckets, name
            else:
                assert spec.instrument == "counter"
                assert isinstance(metric.data, Sum) and metric.data.is_monotonic, name
            for point in metric.data.data_points:
                assert set(point.attributes or {}) == labels, name
        # the values still land where the recorders put them
        (util,) = [p for _, p in tel.metrics()["context.budget.utilization"]]
        assert util.sum == 1.2
        (cov,) = [p for _, p in tel.metrics()["context.compaction.coverage"]]
        assert cov.sum == 0.4
        (lost,) = tel.metrics()["context.items.not_injected"]
        assert lost[0] == {"agent": "support", "kind": "document_excerpt"}
        assert lost[1] == 1
    finally:
        tel.shutdown()
