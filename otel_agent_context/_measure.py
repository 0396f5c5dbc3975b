"""Bundle -> metric measurements: contract section 3, derived from a rebuilt envelope.

The processor (and anything else holding a bundle) turns every rebuilt envelope into the
measurements of the contract's metrics here, so an agent that only sends traces still gets
its metrics. The function is pure: a bundle dict in (the shape of ``Bundle.to_dict()``),
a list of :class:`Measurement` out; aggregation and exposition are the caller's business.

Labels follow the table's metrics (``_table.METRICS``) exactly and are always strings; a
missing value is ``"unknown"``, never an id (contract section 3 keeps labels low in
cardinality). A label taken from an enum attribute only ever carries one of the enum's values,
``custom`` or ``unknown``; a value that is not a finite number is never measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from . import _semconv as S
from ._table import ATTRIBUTES, METRICS

__all__ = ["HISTOGRAMS", "UNKNOWN", "Measurement", "measure", "prometheus_name"]

#: The label value used when a bundle does not say (e.g. no ``gen_ai.agent.name``).
UNKNOWN = "unknown"

#: Metrics of contract section 3 that are histograms; every other one is a counter.
HISTOGRAMS = frozenset(name for name, spec in METRICS.items() if spec.instrument == "histogram")
_CUSTOM = "custom"

_RESOLVED = "resolved"


class Measurement(NamedTuple):
    """One observation of one contract metric.

    ``labels`` are the values of ``METRIC_LABELS[name]``, in that order. For a counter
    ``value`` is the increment, for a histogram the observed value. ``trace_id`` (32 hex)
    is the exemplar a histogram bucket can carry, so a panel can jump to the trace.
    """

    name: str
    labels: tuple[str, ...]
    value: float
    trace_id: str | None = None


def prometheus_name(name: str) -> str:
    """The Prometheus exposition name of a contract metric (``context_envelopes_total``)."""
    return S.PROMETHEUS_NAMES[name]


def _label(value: Any) -> str:
    if value is None or value == "":
        return UNKNOWN
    return str(value)


def _enum_labels(attribute: str) -> tuple[dict[Any, str], str]:
    """The labels of an enum attribute's values: its members as themselves, None and ""
    unknown; and the label of any other value (custom, where the enum has it, else
    unknown)."""
    spec = ATTRIBUTES[attribute]
    table: dict[Any, str] = {None: UNKNOWN, "": UNKNOWN, **{m: m for m in spec.members}}
    return table, _CUSTOM if spec.has_custom else UNKNOWN


def _enum_label(attribute: str) -> Any:
    """A label function for values of an enum attribute (see :func:`_enum_labels`)."""
    table, other = _enum_labels(attribute)
    return lambda value: table.get(value, other)


_scope = _enum_label(S.CONTEXT_SCOPE)
_strategy = _enum_label(S.BUDGET_OVERFLOW_STRATEGY)
_kind = _enum_label(S.ITEM_KIND)
_reason = _enum_label(S.OMISSION_REASON)
_injection_target = _enum_label(S.INJECTION_TARGET)
_point = _enum_label(S.INJECTION_POINT)
_method = _enum_label(S.COMPACTION_METHOD)
_trigger = _label  # free-form in the standard, like the agent name
_severity = _enum_label(S.MISSING_SEVERITY)
_REBUILD_STATUSES = frozenset({"complete", "partial"})


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _list(bundle: Mapping[str, Any], key: str) -> list[Any]:
    value = bundle.get(key)
    return value if isinstance(value, list) else []


#: ``_new(Measurement, fields)``: a Measurement from its four fields as one tuple, by the C
#: constructor (the class's own ``__new__`` is a Python function, most of what a budget's
#: measurement cost; called directly, not through a ``partial``: one call less).
_new = tuple.__new__


def measure(bundle: Mapping[str, Any]) -> list[Measurement]:
    """All measurements of contract section 3 that one rebuilt envelope yields."""
    envelope = bundle.get("context_envelope") or {}
    metadata = envelope.get("metadata") or {}
    agent = _label(metadata.get(S.GEN_AI_AGENT_NAME))
    refs = envelope.get("telemetry_refs") or []
    trace_id = refs[0].get("trace_id") if refs and isinstance(refs[0], dict) else None
    rebuild = bundle.get("rebuild") or {}
    out = [_new(Measurement, (
        S.METRIC_ENVELOPES,
        (_scope(envelope.get("scope")), agent,
         rebuild["status"] if rebuild.get("status") in _REBUILD_STATUSES else UNKNOWN),
        1.0, None,
    ))]
    _budgets(bundle, agent, trace_id, out)
    if not _OTHER_RECORDS.isdisjoint(bundle):  # an envelope of budgets alone: done
        out.extend(_iter_measurements(bundle, agent, trace_id))
    return out


#: the bundle's lists measured after the budgets (items only through selections)
_OTHER_RECORDS = frozenset({"context_selections", "context_injections", "context_compactions",
                            "missing_context"})


#: budget target -> its label, read in line by the budgets' loop (the hot case)
_TARGET_LABELS, _TARGET_OTHER = _enum_labels(S.BUDGET_TARGET)


def _budgets(bundle: Mapping[str, Any], agent: str, trace_id: str | None,
             out: list[Measurement]) -> None:
    """The budgets' measurements, appended to ``out`` (in place, no generator: an envelope
    of many budgets is the common heavy case)."""
    add = out.append
    targets = _TARGET_LABELS
    for budget in _list(bundle, "context_budgets"):
        target = targets.get(budget.get("target"), _TARGET_OTHER)
        utilization = budget.get("utilization")
        if type(utilization) is not float or utilization - utilization != 0.0:
            utilization = _number(utilization)  # an int, not finite, absent, not a number
            if utilization is None:
                actual = _number(budget.get("actual_tokens"))
                maximum = _number(budget.get("max_tokens"))
                if actual is not None and maximum:
                    utilization = actual / maximum
        if utilization is not None:
            add(_new(Measurement, (S.METRIC_BUDGET_UTILIZATION, (target, agent), utilization,
                                   trace_id)))
        if budget.get("overflow") is True:
            add(Measurement(S.METRIC_BUDGET_OVERFLOWS,
                            (target, agent, _strategy(budget.get("overflow_strategy"))), 1.0))
        records = budget.get("truncation_records")
        if not records:
            continue
        truncated_tokens = 0.0
        for record in records:
            strategy = record.get("strategy") or budget.get("overflow_strategy")
            add(Measurement(S.METRIC_TRUNCATIONS, (target, agent, _strategy(strategy)), 1.0))
            before = _number(record.get("tokens_before"))
            after = _number(record.get("tokens_after"))
            if before is not None and after is not None and before > after:
                truncated_tokens += before - after
        if truncated_tokens:
            add(Measurement(S.METRIC_TRUNCATED_TOKENS, (target, agent), truncated_tokens))


def _iter_measurements(bundle: Mapping[str, Any], agent: str, trace_id: str | None
                       ) -> Iterator[Measurement]:
    """The measurements after the budgets'."""
    # -- selection and omission ---------------------------------------------------------------
    items = {
        item.get("item_id"): item
        for item in _list(bundle, "context_items")
        if isinstance(item, dict)
    }
    # Counted per label set first: a selection of 100 items is a few increments, not 100.
    selected: dict[str, int] = {}
    not_injected: dict[str, int] = {}
    omitted: dict[tuple[str, str], int] = {}
    omitted_tokens: dict[str, float] = {}
    for selection in _list(bundle, "context_selections"):
        for item_id in selection.get("selected_item_refs") or []:
            kind = _kind((items.get(item_id) or {}).get("context_kind"))
            selected[kind] = selected.get(kind, 0) + 1
        for item_id in selection.get("not_injected_item_refs") or []:
            kind = _kind((items.get(item_id) or {}).get("context_kind"))
            not_injected[kind] = not_injected.get(kind, 0) + 1
        for ref in selection.get("omitted_item_refs") or []:
            item = items.get(ref.get("item_id")) or {}
            reason = _reason(ref.get("reason"))
            labels = (_kind(item.get("context_kind")), reason)
            omitted[labels] = omitted.get(labels, 0) + 1
            tokens = _number(item.get("token_estimate"))
            if tokens is not None and tokens > 0:  # a counter never goes down
                omitted_tokens[reason] = omitted_tokens.get(reason, 0.0) + tokens
    for kind, count in selected.items():
        yield Measurement(S.METRIC_ITEMS_SELECTED, (agent, kind), float(count))
    for kind, count in not_injected.items():
        yield Measurement(S.METRIC_ITEMS_NOT_INJECTED, (agent, kind), float(count))
    for (kind, reason), count in omitted.items():
        yield Measurement(S.METRIC_ITEMS_OMITTED, (agent, kind, reason), float(count))
    for reason, tokens in omitted_tokens.items():
        yield Measurement(S.METRIC_OMITTED_TOKENS, (agent, reason), tokens)

    # -- injection ----------------------------------------------------------------------------
    for injection in _list(bundle, "context_injections"):
        yield Measurement(
            S.METRIC_INJECTIONS,
            (_injection_target(injection.get("target")), _point(injection.get("injection_point"))),
            1.0,
        )

    # -- compaction ---------------------------------------------------------------------------
    for compaction in _list(bundle, "context_compactions"):
        method = _method(compaction.get("method"))
        yield Measurement(
            S.METRIC_COMPACTIONS, (agent, method, _trigger(compaction.get("trigger"))), 1.0
        )
        coverage = _number(compaction.get("coverage"))
        if coverage is not None:
            yield Measurement(S.METRIC_COMPACTION_COVERAGE, (agent, method), coverage, trace_id)
        sources = compaction.get("source_coverage") or []
        uncovered = sum(1 for source in sources if source.get("covered") is False)
        if uncovered:
            yield Measurement(S.METRIC_COMPACTION_UNCOVERED_SOURCES, (agent, method), uncovered)
        notes = len(compaction.get("loss_notes") or [])
        if notes:
            yield Measurement(S.METRIC_COMPACTION_LOSS_NOTES, (agent, method), notes)

    # -- missing context ------------------------------------------------------------------------
    for missing in _list(bundle, "missing_context"):
        severity = _severity(missing.get("severity"))
        yield Measurement(S.METRIC_MISSING_DETECTED, (agent, severity), 1.0)
        if (
            missing.get("status") == _RESOLVED
            or missing.get("resolved_at")
            or missing.get("resolution_refs")
        ):
            yield Measurement(S.METRIC_MISSING_RESOLVED, (agent, severity), 1.0)
