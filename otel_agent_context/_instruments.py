"""The metric instruments of the contract (section 3), made once per ``AgentContext``.

Recorded by the recorders when a stage ends: low-cardinality attributes only (agent,
target, kind, reason, ...), never ids or content.
"""

from __future__ import annotations

from opentelemetry import metrics

from . import _semconv as S

__all__: list[str] = []

#: Histogram buckets for ratios: fine near 1.0, where budgets and coverage matter.
_RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0, 1.1, 1.25, 1.5, 2.0)


class _Instruments:
    """The contract section 3 instruments, made once per AgentContext."""

    def __init__(self, meter: metrics.Meter) -> None:
        c = meter.create_counter

        def h(name: str, unit: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(name, unit, description,
                                          explicit_bucket_boundaries_advisory=_RATIO_BUCKETS)

        self.envelopes = c(S.METRIC_ENVELOPES, "{envelope}", "Context envelopes completed")
        self.utilization = h(S.METRIC_BUDGET_UTILIZATION, "1", "Budget utilization (actual/max)")
        self.overflows = c(S.METRIC_BUDGET_OVERFLOWS, "{overflow}", "Budgets that overflowed")
        self.truncations = c(S.METRIC_TRUNCATIONS, "{truncation}", "Truncations to fit a budget")
        self.truncated_tokens = c(S.METRIC_TRUNCATED_TOKENS, "{token}", "Tokens cut by truncation")
        self.selected = c(S.METRIC_ITEMS_SELECTED, "{item}", "Items selected")
        self.omitted = c(S.METRIC_ITEMS_OMITTED, "{item}", "Candidate items omitted")
        self.omitted_tokens = c(S.METRIC_OMITTED_TOKENS, "{token}", "Tokens of omitted items")
        self.injections = c(S.METRIC_INJECTIONS, "{injection}", "Context injections")
        self.compactions = c(S.METRIC_COMPACTIONS, "{compaction}", "Compactions")
        self.coverage = h(S.METRIC_COMPACTION_COVERAGE, "1", "Compaction source coverage")
        self.uncovered = c(S.METRIC_COMPACTION_UNCOVERED_SOURCES, "{source}",
                           "Compaction sources the summary does not account for")
        self.loss_notes = c(S.METRIC_COMPACTION_LOSS_NOTES, "{note}", "Compaction loss notes")
        self.missing_detected = c(S.METRIC_MISSING_DETECTED, "{gap}", "Missing context detected")
        self.missing_resolved = c(S.METRIC_MISSING_RESOLVED, "{gap}", "Missing context resolved")
