"""The metric instruments of the contract (section 3), made once per ``AgentContext``.

Every instrument is the table's (``_table.METRICS``, generated from semconv/registry.yaml):
name, kind, unit, description and, for histograms, the bucket boundaries, so the agent
side and the processor's ``/metrics`` agree by construction. Recorded by the recorders when
a stage ends, with the table's labels as attribute names (``agent``, ``target``, ``kind``,
``reason``...): low-cardinality, never ids or content.
"""

from __future__ import annotations

from opentelemetry import metrics

from . import _semconv as S
from ._table import METRICS

__all__: list[str] = []

#: The member each metric of the table is recorded through (``inst.utilization.record``).
#: A metric the table adds later gets a member named after it (``context.x.y`` -> ``x_y``).
_MEMBERS = {
    S.METRIC_ENVELOPES: "envelopes",
    S.METRIC_BUDGET_UTILIZATION: "utilization",
    S.METRIC_BUDGET_OVERFLOWS: "overflows",
    S.METRIC_TRUNCATIONS: "truncations",
    S.METRIC_TRUNCATED_TOKENS: "truncated_tokens",
    S.METRIC_ITEMS_SELECTED: "selected",
    S.METRIC_ITEMS_OMITTED: "omitted",
    S.METRIC_ITEMS_NOT_INJECTED: "not_injected",
    S.METRIC_OMITTED_TOKENS: "omitted_tokens",
    S.METRIC_INJECTIONS: "injections",
    S.METRIC_COMPACTIONS: "compactions",
    S.METRIC_COMPACTION_COVERAGE: "coverage",
    S.METRIC_COMPACTION_UNCOVERED_SOURCES: "uncovered",
    S.METRIC_COMPACTION_LOSS_NOTES: "loss_notes",
    S.METRIC_MISSING_DETECTED: "missing_detected",
    S.METRIC_MISSING_RESOLVED: "missing_resolved",
}


def _member(metric: str) -> str:
    return _MEMBERS.get(metric) or metric.removeprefix("context.").replace(".", "_")


class _Instruments:
    """The contract section 3 instruments, made once per AgentContext from the table."""

    envelopes: metrics.Counter
    utilization: metrics.Histogram
    overflows: metrics.Counter
    truncations: metrics.Counter
    truncated_tokens: metrics.Counter
    selected: metrics.Counter
    omitted: metrics.Counter
    not_injected: metrics.Counter
    omitted_tokens: metrics.Counter
    injections: metrics.Counter
    compactions: metrics.Counter
    coverage: metrics.Histogram
    uncovered: metrics.Counter
    loss_notes: metrics.Counter
    missing_detected: metrics.Counter
    missing_resolved: metrics.Counter

    def __init__(self, meter: metrics.Meter) -> None:
        for spec in METRICS.values():
            instrument: metrics.Counter | metrics.Histogram
            if spec.instrument == "histogram":
                instrument = meter.create_histogram(
                    spec.name, spec.unit, spec.description,
                    explicit_bucket_boundaries_advisory=spec.buckets)
            elif spec.instrument == "counter":
                instrument = meter.create_counter(spec.name, spec.unit, spec.description)
            else:
                raise ValueError(f"{spec.name}: no {spec.instrument!r} instrument here")
            setattr(self, _member(spec.name), instrument)
