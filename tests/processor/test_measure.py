"""Bundle -> contract section 3 measurements (``otel_agent_context._measure``)."""

from __future__ import annotations

from collections import defaultdict

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_context import _semconv as S
from otel_agent_context._demo_agent import run_demo
from otel_agent_context._measure import HISTOGRAMS, Measurement, measure, prometheus_name
from otel_agent_context.rebuild import rebuild, view_from_readable_span

TRACE = "0af7651916cd43dd8448eb211c80319c"

BUNDLE = {
    "context_envelope": {
        "context_id": "ctx_1", "scope": "turn",
        "metadata": {S.GEN_AI_AGENT_NAME: "support"},
        "telemetry_refs": [{"trace_id": TRACE, "span_id": "b7ad6b7169203331"}],
    },
    "context_items": [
        {"item_id": "a", "context_kind": "document_excerpt", "token_estimate": 100},
        {"item_id": "b", "context_kind": "document_excerpt", "token_estimate": 250},
        {"item_id": "c", "context_kind": "tool_result"},
    ],
    "context_selections": [{
        "selection_id": "s1", "selected_item_refs": ["a", "c"],
        "omitted_item_refs": [{"item_id": "b", "reason": "budget"},
                              {"item_id": "zz", "reason": "low_relevance"}],
    }],
    "context_budgets": [{
        "budget_id": "b1", "target": "model", "utilization": 1.05, "overflow": True,
        "overflow_strategy": "truncate_middle",
        "truncation_records": [{"item_id": "a", "strategy": "truncate_middle",
                                "tokens_before": 400, "tokens_after": 100},
                               {"segment": "history", "tokens_before": 50, "tokens_after": 40}],
    }, {"budget_id": "b2", "target": "tool", "max_tokens": 1000, "actual_tokens": 250}],
    "context_injections": [{"injection_id": "i1", "target": "model",
                            "injection_point": "system_prompt"}],
    "context_compactions": [{
        "compaction_id": "k1", "method": "rolling_summary", "trigger": "history_over_budget",
        "coverage": 0.8, "loss_notes": ["lost the refund amount"],
        "source_coverage": [{"item_id": "m1", "covered": True},
                            {"item_id": "m2", "covered": False}],
    }],
    "missing_context": [{"missing_id": "g1", "severity": "blocking", "status": "resolved"},
                        {"missing_id": "g2", "severity": "low", "status": "open"}],
    "rebuild": {"status": "partial", "partial_reasons": ["timeout"]},
}


def test_every_metric_of_a_bundle() -> None:
    got = defaultdict(float)
    for m in measure(BUNDLE):
        got[(m.name, m.labels)] += m.value
    assert dict(got) == {
        (S.METRIC_ENVELOPES, ("turn", "support", "partial")): 1,
        (S.METRIC_BUDGET_UTILIZATION, ("model", "support")): 1.05,
        (S.METRIC_BUDGET_OVERFLOWS, ("model", "support", "truncate_middle")): 1,
        (S.METRIC_TRUNCATIONS, ("model", "support", "truncate_middle")): 2,
        (S.METRIC_TRUNCATED_TOKENS, ("model", "support")): 310,
        (S.METRIC_BUDGET_UTILIZATION, ("tool", "support")): 0.25,
        (S.METRIC_ITEMS_SELECTED, ("support", "document_excerpt")): 1,
        (S.METRIC_ITEMS_SELECTED, ("support", "tool_result")): 1,
        (S.METRIC_ITEMS_OMITTED, ("support", "document_excerpt", "budget")): 1,
        (S.METRIC_ITEMS_OMITTED, ("support", "unknown", "low_relevance")): 1,
        (S.METRIC_OMITTED_TOKENS, ("support", "budget")): 250,
        (S.METRIC_INJECTIONS, ("model", "system_prompt")): 1,
        (S.METRIC_COMPACTIONS, ("support", "rolling_summary", "history_over_budget")): 1,
        (S.METRIC_COMPACTION_COVERAGE, ("support", "rolling_summary")): 0.8,
        (S.METRIC_COMPACTION_UNCOVERED_SOURCES, ("support", "rolling_summary")): 1,
        (S.METRIC_COMPACTION_LOSS_NOTES, ("support", "rolling_summary")): 1,
        (S.METRIC_MISSING_DETECTED, ("support", "blocking")): 1,
        (S.METRIC_MISSING_DETECTED, ("support", "low")): 1,
        (S.METRIC_MISSING_RESOLVED, ("support", "blocking")): 1,
    }


def test_histograms_carry_the_trace_id_and_counters_do_not() -> None:
    for m in measure(BUNDLE):
        assert (m.trace_id == TRACE) == (m.name in HISTOGRAMS)


def test_empty_bundle_counts_one_envelope_with_unknown_labels() -> None:
    assert measure({"context_envelope": {"context_id": "x"}}) == [
        Measurement(S.METRIC_ENVELOPES, ("unknown", "unknown", "unknown"), 1.0)]


def test_labels_and_names_match_the_contract_on_demo_bundles() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_demo(provider, turns=6, seed=4)
    bundles = rebuild([view_from_readable_span(s) for s in exporter.get_finished_spans()])
    names = set()
    for bundle in bundles:
        for m in measure(bundle):
            names.add(m.name)
            assert len(m.labels) == len(S.METRIC_LABELS[m.name])
            assert all(isinstance(v, str) and v for v in m.labels)
            assert not any(v.startswith(("ctx_", "conv-", "kb:", "msg:")) for v in m.labels)
    assert {prometheus_name(n) for n in names} <= set(S.PROMETHEUS_NAMES.values())
    assert S.METRIC_ITEMS_OMITTED in names and S.METRIC_BUDGET_UTILIZATION in names


def test_budget_utilization_and_target_of_every_shape() -> None:
    # A float ratio is taken as it is; anything else (an int, NaN, an infinity, a bool, text,
    # absent) goes the long way: a finite number, else actual / max tokens, else nothing.
    nan, inf = float("nan"), float("inf")
    budgets = [
        {"target": "model", "utilization": 0.25},
        {"target": "tool", "utilization": 1},
        {"target": "MODEL", "utilization": nan, "actual_tokens": 30, "max_tokens": 60},
        {"target": "", "utilization": inf, "actual_tokens": 1, "max_tokens": 4},
        {"utilization": True, "actual_tokens": 1, "max_tokens": 0},
        {"target": None, "utilization": "0.5", "actual_tokens": 3.0, "max_tokens": 4},
        {"target": "user"},
    ]
    bundle = {"context_envelope": {"metadata": {S.GEN_AI_AGENT_NAME: "a"}},
              "context_budgets": budgets}
    got = [(m.labels, m.value, type(m.value)) for m in measure(bundle)
           if m.name == S.METRIC_BUDGET_UTILIZATION]
    assert got == [(("model", "a"), 0.25, float), (("tool", "a"), 1.0, float),
                   (("unknown", "a"), 0.5, float), (("unknown", "a"), 0.25, float),
                   (("unknown", "a"), 0.75, float)]
    # only budgets: the envelope and its utilizations, nothing else
    assert [m.name for m in measure(bundle)] == [S.METRIC_ENVELOPES] + [
        S.METRIC_BUDGET_UTILIZATION] * 5
