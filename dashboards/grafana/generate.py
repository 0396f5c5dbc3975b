#!/usr/bin/env python3
"""Build the Grafana dashboards of otel-agent-context (dashboards as code, standard library only).

The committed JSON under ``dashboards/grafana/dashboards/`` is what Grafana loads; this script
is how it is written, so that every panel follows the same conventions (datasource bound by the
``${datasource}`` variable, unique ids, exemplars on histogram panels, legends and units)::

    python3 dashboards/grafana/generate.py          # rewrite the JSON files
    python3 dashboards/grafana/generate.py --check  # exit 1 if a committed file is out of date

Metric names are the telemetry contract's (section 3) and the processor's self-metrics
(``context_processor_*``). The contract's come from the one table
(``otel_agent_context/_table.py``, loaded by path): a query naming a contract metric the
table does not have fails the build. ``tests/stack/test_dashboards.py`` checks both, and
that the files are up to date.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 42
OUT_DIR = Path(__file__).resolve().parent / "dashboards"
TABLE = Path(__file__).resolve().parents[2] / "otel_agent_context" / "_table.py"


def _load_table() -> Any:
    spec = importlib.util.spec_from_file_location("otel_agent_context_table", TABLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple classes look their module up
    spec.loader.exec_module(module)
    return module


#: Prometheus names of the contract's metrics, from the table.
CONTRACT_METRICS = frozenset(spec.prometheus_name for spec in _load_table().METRICS.values())
_SERIES = re.compile(r"\bcontext_[a-z_]+")
_SUFFIXES = ("_bucket", "_count", "_sum")
TAGS = ["agent-context"]

PROM = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
RANGE = "$__range"

UID_OVERVIEW = "agent-context-overview"
UID_AGENT = "agent-context-agent"
UID_PROCESSOR = "agent-context-processor"

Panel = dict[str, Any]


# --------------------------------------------------------------------------- building blocks


def target(expr: str, legend: str = "__auto", *, exemplar: bool = False, instant: bool = False,
           fmt: str = "time_series") -> dict[str, Any]:
    """A Prometheus query; ``refId`` is filled in by the panel."""
    return {
        "datasource": PROM,
        "editorMode": "code",
        "expr": expr,
        "exemplar": exemplar,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
    }


def _thresholds(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


GREEN_ONLY = _thresholds(("green", None))


def timeseries(title: str, description: str, targets: list[dict[str, Any]], *, unit: str = "short",
               w: int = 12, h: int = 8, stack: bool = False, threshold: float | None = None,
               minimum: float | None = 0, maximum: float | None = None,
               links: list[dict[str, Any]] | None = None) -> Panel:
    custom: dict[str, Any] = {
        "drawStyle": "line",
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "fillOpacity": 10,
        "gradientMode": "none",
        "showPoints": "never",
        "spanNulls": False,
        "axisPlacement": "auto",
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "thresholdsStyle": {"mode": "off" if threshold is None else "line+area"},
    }
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": custom,
        "color": {"mode": "palette-classic"},
        "thresholds": GREEN_ONLY if threshold is None
        else _thresholds(("transparent", None), ("red", threshold)),
        "links": links or [],
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["mean", "max", "lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "_size": (w, h),
    }


def stat(title: str, description: str, expr: str, *, unit: str = "short",
         thresholds: dict[str, Any] | None = None, w: int = 4, h: int = 4,
         decimals: int | None = None) -> Panel:
    defaults: dict[str, Any] = {
        "unit": unit,
        "color": {"mode": "thresholds"},
        "thresholds": thresholds or GREEN_ONLY,
        "mappings": [],
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": [target(expr, "", instant=False)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
            "wideLayout": True,
            "showPercentChange": False,
        },
        "_size": (w, h),
    }


def bargauge(title: str, description: str, expr: str, legend: str, *, unit: str = "short",
             w: int = 8, h: int = 8) -> Panel:
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": [target(expr, legend, instant=True)],
        "fieldConfig": {
            "defaults": {"unit": unit, "min": 0, "color": {"mode": "continuous-YlRd"},
                         "thresholds": GREEN_ONLY},
            "overrides": [],
        },
        "options": {
            "orientation": "horizontal",
            "displayMode": "gradient",
            "valueMode": "color",
            "namePlacement": "auto",
            "showUnfilled": True,
            "sizing": "auto",
            "minVizHeight": 16,
            "maxVizHeight": 300,
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
        },
        "_size": (w, h),
    }


def heatmap(title: str, description: str, expr: str, *, unit: str, w: int = 12,
            h: int = 9) -> Panel:
    """A heatmap of a classic histogram's buckets, with its trace-id exemplars as points."""
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": [target(expr, "{{le}}", exemplar=True, fmt="heatmap")],
        "fieldConfig": {
            "defaults": {"custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                    "scaleDistribution": {"type": "linear"}}},
            "overrides": [],
        },
        "options": {
            "calculate": False,
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential",
                      "exponent": 0.5, "steps": 64, "fill": "dark-orange", "reverse": False},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-09},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
        },
        "_size": (w, h),
    }


def table(title: str, description: str, expr: str, *, w: int = 24, h: int = 6) -> Panel:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": PROM,
        "targets": [target(expr, "", instant=True, fmt="table")],
        "fieldConfig": {"defaults": {"thresholds": GREEN_ONLY, "custom": {"align": "auto"}},
                        "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm",
                    "footer": {"show": False, "reducer": ["sum"], "fields": ""}},
        "transformations": [
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True,
                                                             "__name__": True}}},
        ],
        "_size": (w, h),
    }


def row(title: str) -> Panel:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "_size": (24, 1)}


def layout(panels: list[Panel]) -> list[Panel]:
    """Give panels ids, refIds and grid positions, left to right, wrapping at 24 columns."""
    x = y = row_h = 0
    out = []
    for pid, panel in enumerate(panels, start=1):
        w, h = panel.pop("_size")
        if panel["type"] == "row" or x + w > 24:
            y += row_h
            x = row_h = 0
        panel = {"id": pid, "gridPos": {"h": h, "w": w, "x": x, "y": y}, **panel}
        for i, t in enumerate(panel.get("targets", [])):
            t["refId"] = chr(ord("A") + i)
        out.append(panel)
        x += w
        row_h = max(row_h, h)
        if panel["type"] == "row":
            y += h
            x = row_h = 0
    return out


def datasource_var(name: str, ds_type: str, label: str, default_uid: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "datasource",
        "query": ds_type,
        "current": {"selected": False, "text": default_uid, "value": default_uid},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_var(name: str, label: str, query: str, *, multi: bool, include_all: bool,
              hide: int = 0) -> dict[str, Any]:
    """A variable filled by a ``label_values(selector, label)`` query on the Prometheus source."""
    var: dict[str, Any] = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": PROM,
        "definition": query,
        "query": {"qryType": 1, "query": query,
                  "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "hide": hide,
        "multi": multi,
        "includeAll": include_all,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all
        else {},
        "options": [],
        "skipUrlSync": False,
    }
    if include_all:
        var["allValue"] = ".*"
    return var


def textbox_var(name: str, label: str, default: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "textbox",
        "query": default,
        "current": {"selected": False, "text": default, "value": default},
        "options": [{"selected": True, "text": default, "value": default}],
        "hide": 0,
        "skipUrlSync": False,
    }


ALERT_ANNOTATION = {
    "name": "Agent context alerts",
    "datasource": PROM,
    "enable": True,
    "hide": False,
    "iconColor": "red",
    "expr": 'ALERTS{alertname=~"AgentContext.*", alertstate="firing"}',
    "step": "60s",
    "titleFormat": "{{alertname}}",
    "textFormat": "{{severity}} {{agent}} {{target}} {{method}} {{instance}}",
    "tagKeys": "severity",
    "useValueForTime": False,
}

BUILTIN_ANNOTATION = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}

DASHBOARD_LINKS = [
    {"title": "Agent context", "type": "dashboards", "tags": TAGS, "asDropdown": True,
     "includeVars": False, "keepTime": True, "targetBlank": False, "icon": "external link",
     "tooltip": "", "url": ""},
]


def dashboard(uid: str, title: str, description: str, panels: list[Panel],
              variables: list[dict[str, Any]], links: list[dict[str, Any]] | None = None,
              ) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "weekStart": "",
        "annotations": {"list": [BUILTIN_ANNOTATION, ALERT_ANNOTATION]},
        "links": DASHBOARD_LINKS + (links or []),
        "templating": {"list": variables},
        "panels": layout(panels),
    }


def drilldown_link(label: str = "agent") -> list[dict[str, Any]]:
    """A data link from a series with an ``agent`` label to the agent drill-down."""
    field = "${__field.labels." + label + "}"
    return [{
        "title": f"Drill down into agent {field}",
        "url": f"/d/{UID_AGENT}/agent-context-agent-drill-down?var-datasource=${{datasource}}"
               f"&var-agent={field}&${{__url_time_range}}",
    }]


PCT_ALERT = _thresholds(("green", None), ("orange", 0.05), ("red", 0.10))
ANY_IS_RED = _thresholds(("green", None), ("red", 1))
COVERAGE = _thresholds(("red", None), ("orange", 0.8), ("green", 0.9))


# --------------------------------------------------------------------------- context overview


def overview() -> dict[str, Any]:
    a = 'agent=~"$agent"'
    panels: list[Panel] = [
        row("Envelopes"),
        stat("Envelopes rebuilt", "Context envelopes rebuilt per second.",
             f"sum(rate(context_envelopes_total{{{a}}}[{RATE}]))", unit="ops"),
        stat("Partial envelopes", "Share of envelopes rebuilt as partial (spans missing or late). "
             "Alert AgentContextPartialEnvelopes above 5%.",
             f'(sum(rate(context_envelopes_total{{{a},status="partial"}}[{RATE}])) or vector(0))'
             f" / sum(rate(context_envelopes_total{{{a}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Budget overflow share", "Share of budget evaluations that overflowed. "
             "Alert AgentContextBudgetOverflowHigh above 10% per agent and target.",
             f"(sum(rate(context_budget_overflows_total{{{a}}}[{RATE}])) or vector(0))"
             f" / sum(rate(context_budget_utilization_ratio_count{{{a}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Truncations", "Truncations in the selected time range.",
             f"sum(increase(context_truncations_total{{{a}}}[{RANGE}])) or vector(0)",
             thresholds=_thresholds(("green", None), ("orange", 1)), decimals=0),
        stat("Blocking missing context", "Missing-context records of severity blocking in the "
             "selected time range. Alert AgentContextBlockingMissing.",
             f'sum(increase(context_missing_detected_total{{{a},severity="blocking"}}[{RANGE}]))'
             " or vector(0)", thresholds=ANY_IS_RED, decimals=0),
        stat("Firing alerts", "Agent context alerts firing now (see docs/operations.md).",
             'count(ALERTS{alertname=~"AgentContext.*", alertstate="firing"}) or vector(0)',
             thresholds=ANY_IS_RED, decimals=0),
        timeseries("Envelopes by scope and status", "Envelopes rebuilt per second.",
                   [target(f"sum by (scope, status) (rate(context_envelopes_total{{{a}}}[{RATE}]))",
                           "{{scope}} {{status}}")], unit="ops", stack=True),
        timeseries("Envelopes by agent", "Envelopes rebuilt per second, per agent. Click a "
                   "series to drill down into that agent.",
                   [target(f"sum by (agent, status) (rate(context_envelopes_total{{{a}}}[{RATE}]))",
                           "{{agent}} {{status}}")], unit="ops", links=drilldown_link()),
        row("Budget and window"),
        timeseries(
            "Budget utilization p50 / p95 / p99",
            "Used share of each budget (actual / max tokens) per agent and visibility target. "
            "Points are exemplars: click one to open its trace in Jaeger.",
            [target(f"histogram_quantile({q}, sum by (le, agent, target) "
                    f"(rate(context_budget_utilization_ratio_bucket{{{a}}}[{RATE}])))",
                    f"p{round(q * 100)} {{{{agent}}}} / {{{{target}}}}", exemplar=True)
             for q in (0.5, 0.95, 0.99)],
            unit="percentunit", threshold=1.0, links=drilldown_link()),
        timeseries(
            "Budget overflow share",
            "Overflowed budget evaluations / all budget evaluations, per agent and target. "
            "The red line is the alert threshold (10%).",
            [target(f"sum by (agent, target) (rate(context_budget_overflows_total{{{a}}}[{RATE}]))"
                    f" / sum by (agent, target) "
                    f"(rate(context_budget_utilization_ratio_count{{{a}}}[{RATE}]))",
                    "{{agent}} / {{target}}")],
            unit="percentunit", threshold=0.10, links=drilldown_link()),
        timeseries("Overflows by strategy", "Budget overflows per second, by target and the "
                   "overflow strategy that handled them.",
                   [target(f"sum by (target, overflow_strategy) "
                           f"(rate(context_budget_overflows_total{{{a}}}[{RATE}]))",
                           "{{target}} {{overflow_strategy}}")], unit="ops", w=8),
        timeseries("Truncations by strategy", "Truncations per second, by target and strategy.",
                   [target(f"sum by (target, strategy) "
                           f"(rate(context_truncations_total{{{a}}}[{RATE}]))",
                           "{{target}} {{strategy}}")], unit="ops", w=8),
        timeseries("Truncated tokens", "Tokens cut by truncation per second, by agent and target.",
                   [target(f"sum by (agent, target) "
                           f"(rate(context_truncated_tokens_total{{{a}}}[{RATE}]))",
                           "{{agent}} / {{target}}")], unit="short", w=8),
        row("Selection and omission"),
        timeseries("Omitted items by reason", "Candidate items left out of the context per "
                   "second, by omission reason.",
                   [target(f"sum by (reason) (rate(context_items_omitted_total{{{a}}}[{RATE}]))",
                           "{{reason}}")], unit="ops", stack=True, w=8),
        bargauge("Omitted items by kind and reason", "Items omitted in the selected time range, "
                 "by item kind and reason.",
                 f"sort_desc(sum by (kind, reason) "
                 f"(increase(context_items_omitted_total{{{a}}}[{RANGE}])))",
                 "{{kind}} · {{reason}}"),
        timeseries("Omitted tokens by reason", "Estimated tokens of omitted items per second.",
                   [target(f"sum by (reason) (rate(context_omitted_tokens_total{{{a}}}[{RATE}]))",
                           "{{reason}}")], unit="short", stack=True, w=8),
        timeseries("Selected items by kind", "Items selected into the context per second.",
                   [target(f"sum by (kind) (rate(context_items_selected_total{{{a}}}[{RATE}]))",
                           "{{kind}}")], unit="ops", stack=True),
        timeseries("Omission share", "Omitted / (selected + omitted) candidate items, per agent.",
                   [target(f"sum by (agent) (rate(context_items_omitted_total{{{a}}}[{RATE}]))"
                           f" / (sum by (agent) (rate(context_items_selected_total{{{a}}}[{RATE}]))"
                           f" + sum by (agent) (rate(context_items_omitted_total{{{a}}}[{RATE}])))",
                           "{{agent}}")], unit="percentunit", maximum=1,
                   links=drilldown_link()),
        timeseries("Selected but never injected",
                   "Selected items no assembly block of their envelope names, neither as its "
                   "item nor among its source refs (retrieved, then left out of the prompt), "
                   "per second, by agent and kind.",
                   [target(f"sum by (agent, kind) "
                           f"(rate(context_items_not_injected_total{{{a}}}[{RATE}]))",
                           "{{agent}} · {{kind}}")], unit="ops", stack=True,
                   links=drilldown_link()),
        timeseries("Never-injected share",
                   "Selected but never injected / selected items, per agent: how much of "
                   "what retrieval chose never reached a prompt.",
                   [target(f"(sum by (agent) (rate(context_items_not_injected_total{{{a}}}"
                           f"[{RATE}])) or sum by (agent) "
                           f"(rate(context_items_selected_total{{{a}}}[{RATE}])) * 0)"
                           f" / sum by (agent) "
                           f"(rate(context_items_selected_total{{{a}}}[{RATE}]))",
                           "{{agent}}")], unit="percentunit", maximum=1,
                   links=drilldown_link()),
        row("Compaction"),
        timeseries("Compactions by method and trigger", "Compactions per second.",
                   [target(f"sum by (method, trigger) "
                           f"(rate(context_compactions_total{{{a}}}[{RATE}]))",
                           "{{method}} ({{trigger}})")], unit="ops", w=8),
        timeseries(
            "Compaction coverage",
            "Share of the replaced history that summaries account for: the mean per agent and "
            "method, and the 10th percentile (the worst compactions; points are exemplars that "
            "open the trace). The red line is the alert threshold (80%).",
            [target(f"sum by (agent, method) (rate(context_compaction_coverage_ratio_sum{{{a}}}"
                    f"[{RATE}])) / sum by (agent, method) "
                    f"(rate(context_compaction_coverage_ratio_count{{{a}}}[{RATE}]))",
                    "mean {{agent}} / {{method}}"),
             target(f"histogram_quantile(0.10, sum by (le, agent, method) "
                    f"(rate(context_compaction_coverage_ratio_bucket{{{a}}}[{RATE}])))",
                    "p10 {{agent}} / {{method}}", exemplar=True)],
            unit="percentunit", maximum=1, w=8),
        timeseries("Uncovered sources and loss notes", "Compaction sources no summary covers, "
                   "and loss notes recorded by compactions, per second.",
                   [target(f"sum by (agent, method) "
                           f"(rate(context_compaction_uncovered_sources_total{{{a}}}[{RATE}]))",
                           "uncovered {{agent}} / {{method}}"),
                    target(f"sum by (agent, method) "
                           f"(rate(context_compaction_loss_notes_total{{{a}}}[{RATE}]))",
                           "loss notes {{agent}} / {{method}}")], unit="ops", w=8),
        row("Missing context and injection"),
        timeseries("Missing context by severity", "Missing-context records detected per second.",
                   [target(f"sum by (severity) "
                           f"(rate(context_missing_detected_total{{{a}}}[{RATE}]))",
                           "{{severity}}")], unit="ops", stack=True, w=8),
        bargauge("Unresolved missing context by severity", "Detected minus resolved "
                 "missing-context records in the selected time range.",
                 f"sum by (severity) (increase(context_missing_detected_total{{{a}}}[{RANGE}]))"
                 f" - (sum by (severity) (increase(context_missing_resolved_total{{{a}}}[{RANGE}]))"
                 f" or sum by (severity) "
                 f"(increase(context_missing_detected_total{{{a}}}[{RANGE}])) * 0)",
                 "{{severity}}"),
        timeseries("Injections by point", "Context injections per second, by visibility target "
                   "and injection point. This metric has no agent label: the agent filter does "
                   "not apply.",
                   [target(f"sum by (target, injection_point) "
                           f"(rate(context_injections_total[{RATE}]))",
                           "{{target}} {{injection_point}}")], unit="ops", stack=True, w=8),
    ]
    variables = [
        datasource_var("datasource", "prometheus", "Prometheus", "prometheus"),
        query_var("agent", "Agent", "label_values(context_envelopes_total, agent)",
                  multi=True, include_all=True),
    ]
    return dashboard(UID_OVERVIEW, "Agent context: overview",
                     "What agents put into their context windows and what they left out: "
                     "budgets, overflow, truncation, omission, compaction, missing context.",
                     panels, variables)


# --------------------------------------------------------------------------- agent drill-down


def agent_drilldown() -> dict[str, Any]:
    a = 'agent="$agent"'
    at = 'agent="$agent", target=~"$target"'
    panels: list[Panel] = [
        row("Agent $agent"),
        stat("Envelopes rebuilt", "Envelopes of this agent per second.",
             f"sum(rate(context_envelopes_total{{{a}}}[{RATE}]))", unit="ops"),
        stat("Partial envelopes", "Share of this agent's envelopes rebuilt as partial.",
             f'(sum(rate(context_envelopes_total{{{a},status="partial"}}[{RATE}])) or vector(0))'
             f" / sum(rate(context_envelopes_total{{{a}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Budget overflow share", "Overflowed / all budget evaluations of the selected "
             "targets.",
             f"(sum(rate(context_budget_overflows_total{{{at}}}[{RATE}])) or vector(0))"
             f" / sum(rate(context_budget_utilization_ratio_count{{{at}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Truncations", "Truncations in the selected time range.",
             f"sum(increase(context_truncations_total{{{at}}}[{RANGE}])) or vector(0)",
             thresholds=_thresholds(("green", None), ("orange", 1)), decimals=0),
        stat("Blocking missing context", "Blocking missing-context records in the selected "
             "time range.",
             f'sum(increase(context_missing_detected_total{{{a},severity="blocking"}}[{RANGE}]))'
             " or vector(0)", thresholds=ANY_IS_RED, decimals=0),
        stat("Mean compaction coverage", "Mean coverage of this agent's compactions in the "
             "selected time range.",
             f"sum(increase(context_compaction_coverage_ratio_sum{{{a}}}[{RANGE}]))"
             f" / sum(increase(context_compaction_coverage_ratio_count{{{a}}}[{RANGE}]))",
             unit="percentunit", thresholds=COVERAGE),
        table("Alerts for this agent", "Agent context alerts pending or firing for this agent.",
              f'ALERTS{{alertname=~"AgentContext.*", {a}}}', h=5),
        row("Budget and window"),
        heatmap("Budget utilization", "Distribution of budget utilization (actual / max). "
                "Points are exemplars: hover one and choose the Jaeger link to open the trace.",
                f"sum by (le) (increase(context_budget_utilization_ratio_bucket{{{at}}}[{RATE}]))",
                unit="percentunit"),
        timeseries("Budget utilization p95 by target", "95th percentile of budget utilization "
                   "per visibility target, with exemplars.",
                   [target(f"histogram_quantile(0.95, sum by (le, target) "
                           f"(rate(context_budget_utilization_ratio_bucket{{{at}}}[{RATE}])))",
                           "p95 {{target}}", exemplar=True)],
                   unit="percentunit", threshold=1.0, h=9),
        timeseries("Overflows by target and strategy", "Budget overflows per second.",
                   [target(f"sum by (target, overflow_strategy) "
                           f"(rate(context_budget_overflows_total{{{at}}}[{RATE}]))",
                           "{{target}} {{overflow_strategy}}")], unit="ops", w=8),
        timeseries("Truncations by target and strategy", "Truncations per second.",
                   [target(f"sum by (target, strategy) "
                           f"(rate(context_truncations_total{{{at}}}[{RATE}]))",
                           "{{target}} {{strategy}}")], unit="ops", w=8),
        timeseries("Truncated tokens by target", "Tokens cut per second.",
                   [target(f"sum by (target) "
                           f"(rate(context_truncated_tokens_total{{{at}}}[{RATE}]))",
                           "{{target}}")], unit="short", w=8),
        row("Selection and omission"),
        timeseries("Selected items by kind", "Items selected into the context per second.",
                   [target(f"sum by (kind) (rate(context_items_selected_total{{{a}}}[{RATE}]))",
                           "{{kind}}")], unit="ops", stack=True, w=8),
        timeseries("Omitted items by kind and reason", "Items left out per second.",
                   [target(f"sum by (kind, reason) "
                           f"(rate(context_items_omitted_total{{{a}}}[{RATE}]))",
                           "{{kind}} · {{reason}}")], unit="ops", stack=True, w=8),
        timeseries("Omitted tokens by reason", "Estimated tokens of omitted items per second.",
                   [target(f"sum by (reason) (rate(context_omitted_tokens_total{{{a}}}[{RATE}]))",
                           "{{reason}}")], unit="short", stack=True, w=8),
        timeseries("Selected but never injected by kind",
                   "Selected items no assembly block of their envelope names (retrieved, then "
                   "left out of the prompt), per second.",
                   [target(f"sum by (kind) "
                           f"(rate(context_items_not_injected_total{{{a}}}[{RATE}]))",
                           "{{kind}}")], unit="ops", stack=True),
        timeseries("Never-injected share", "Selected but never injected / selected items.",
                   [target(f"(sum(rate(context_items_not_injected_total{{{a}}}[{RATE}]))"
                           f" or vector(0))"
                           f" / sum(rate(context_items_selected_total{{{a}}}[{RATE}]))",
                           "share")], unit="percentunit", maximum=1),
        row("Compaction"),
        heatmap("Compaction coverage", "Distribution of compaction coverage. Points are "
                "exemplars: open the trace of a lossy compaction in Jaeger.",
                f"sum by (le) (increase(context_compaction_coverage_ratio_bucket{{{a}}}[{RATE}]))",
                unit="percentunit"),
        timeseries("Compactions by method and trigger", "Compactions per second.",
                   [target(f"sum by (method, trigger) "
                           f"(rate(context_compactions_total{{{a}}}[{RATE}]))",
                           "{{method}} ({{trigger}})")], unit="ops", h=9),
        timeseries("Mean compaction coverage by method", "Mean coverage per method. The red "
                   "line is the alert threshold (80%).",
                   [target(f"sum by (method) (rate(context_compaction_coverage_ratio_sum{{{a}}}"
                           f"[{RATE}])) / sum by (method) "
                           f"(rate(context_compaction_coverage_ratio_count{{{a}}}[{RATE}]))",
                           "{{method}}")], unit="percentunit", maximum=1),
        timeseries("Uncovered sources and loss notes by method", "Per second.",
                   [target(f"sum by (method) "
                           f"(rate(context_compaction_uncovered_sources_total{{{a}}}[{RATE}]))",
                           "uncovered {{method}}"),
                    target(f"sum by (method) "
                           f"(rate(context_compaction_loss_notes_total{{{a}}}[{RATE}]))",
                           "loss notes {{method}}")], unit="ops"),
        row("Missing context"),
        timeseries("Missing context detected by severity", "Records detected per second.",
                   [target(f"sum by (severity) "
                           f"(rate(context_missing_detected_total{{{a}}}[{RATE}]))",
                           "{{severity}}")], unit="ops", stack=True),
        timeseries("Missing context resolved by severity", "Records resolved per second.",
                   [target(f"sum by (severity) "
                           f"(rate(context_missing_resolved_total{{{a}}}[{RATE}]))",
                           "{{severity}}")], unit="ops", stack=True),
    ]
    variables = [
        datasource_var("datasource", "prometheus", "Prometheus", "prometheus"),
        query_var("agent", "Agent", "label_values(context_envelopes_total, agent)",
                  multi=False, include_all=False),
        query_var("target", "Budget target",
                  'label_values(context_budget_utilization_ratio_count{agent="$agent"}, target)',
                  multi=True, include_all=True),
        textbox_var("jaeger_url", "Jaeger UI", "http://localhost:16686"),
    ]
    links = [{"title": "Jaeger", "type": "link", "url": "${jaeger_url}/search", "icon": "bolt",
              "targetBlank": True, "asDropdown": False, "includeVars": False, "keepTime": False,
              "tags": [], "tooltip": "Search traces in the Jaeger UI"}]
    return dashboard(UID_AGENT, "Agent context: agent drill-down",
                     "One agent's context lifecycle, with exemplars that open the trace of a "
                     "turn in Jaeger.", panels, variables, links)


# --------------------------------------------------------------------------- processor health


def processor_health() -> dict[str, Any]:
    s = 'job=~"$job", instance=~"$instance"'

    def per_second(metric: str, by: str, legend: str) -> dict[str, Any]:
        return target(f"sum by ({by}) (rate({metric}{{{s}}}[{RATE}]))", legend)

    panels: list[Panel] = [
        row("Intake"),
        stat("Ready", "Processor instances that replayed their WAL and listen "
             "(context_processor_ready).", f"sum(context_processor_ready{{{s}}})", decimals=0,
             thresholds=_thresholds(("red", None), ("green", 1))),
        stat("Scrape targets down", "Processor targets Prometheus cannot scrape: a dead or "
             "unreachable instance.", 'count(up{job=~"$job"} == 0) or vector(0)', decimals=0,
             thresholds=ANY_IS_RED),
        stat("Spans received", "Spans in decodable export requests, per second.",
             f"sum(rate(context_processor_spans_received_total{{{s}}}[{RATE}]))", unit="ops"),
        stat("Spans rejected", "Share of received spans refused at the door (OTLP partial "
             "success: bad ids, wrong attribute types, context.* without context.id).",
             f"(sum(rate(context_processor_spans_rejected_total{{{s}}}[{RATE}])) or vector(0))"
             f" / sum(rate(context_processor_spans_received_total{{{s}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Partial envelopes", "Share of envelopes emitted as partial. Alert "
             "AgentContextPartialEnvelopes above 5%.",
             f'(sum(rate(context_envelopes_total{{{s},status="partial"}}[{RATE}])) or vector(0))'
             f" / sum(rate(context_envelopes_total{{{s}}}[{RATE}]))",
             unit="percentunit", thresholds=PCT_ALERT),
        stat("Sink, WAL and rebuild errors", "Failed sink writes, exports refused because the "
             "write-ahead log could not write (a full disk), and envelopes the rebuild raised "
             "on, in the selected time range.",
             f"(sum(increase(context_processor_sink_errors_total{{{s}}}[{RANGE}])) or vector(0))"
             f" + (sum(increase(context_processor_wal_write_errors_total{{{s}}}[{RANGE}]))"
             f" or vector(0))"
             f" + (sum(increase(context_processor_rebuild_errors_total{{{s}}}[{RANGE}]))"
             f" or vector(0))",
             thresholds=ANY_IS_RED, decimals=0),
        table("Instances", "Version and protobuf backend of each instance: protobuf_backend "
              "must be upb (the pure-Python backend parses about 100 times slower).",
              f"context_processor_info{{{s}}}", h=5),
        timeseries("Spans by path", "Per second: received; fast path (no context.* or gen_ai.*); "
                   "accepted into an envelope; gen_ai.* spans outside any envelope; duplicates "
                   "(client retries); late (after their envelope was emitted).",
                   [per_second("context_processor_spans_received_total", "instance",
                               "received {{instance}}"),
                    per_second("context_processor_spans_fast_path_total", "instance",
                               "fast path {{instance}}"),
                    per_second("context_processor_spans_accepted_total", "instance",
                               "accepted {{instance}}"),
                    per_second("context_processor_spans_unattributed_total", "instance",
                               "unattributed {{instance}}"),
                    per_second("context_processor_spans_duplicate_total", "instance",
                               "duplicate {{instance}}"),
                    per_second("context_processor_spans_late_total", "instance",
                               "late {{instance}}")], unit="ops", w=8),
        timeseries("Export requests by outcome", "OTLP export requests per second by transport "
                   "and outcome; unavailable is the processor pushing back (queue full).",
                   [per_second("context_processor_requests_total", "transport, outcome",
                               "{{transport}} {{outcome}}")], unit="reqps", stack=True, w=8),
        timeseries("Spans rejected by transport", "Spans refused per second.",
                   [per_second("context_processor_spans_rejected_total", "transport",
                               "{{transport}}")], unit="ops", stack=True, w=8),
        timeseries("Repairs by kind", "Off-spec values per second that the boundary repaired "
                   "or dropped alone (enum case, unknown enum values, wrong types, non-finite "
                   "numbers, events without their id or time, spans of another trace). Each is "
                   "listed in its bundle's rebuild.repairs and told to the sender; serve logs "
                   "them by service.name.",
                   [per_second("context_processor_repairs_total", "kind", "{{kind}}")],
                   unit="ops", stack=True, w=8),
        timeseries("Metric limits", "Per second: contract metric label values counted as "
                   "'other' (a label past metrics.label_values distinct values, by metric and "
                   "label), values cut for being over 128 characters, and measurements left "
                   "out because they would make a histogram's sum infinite.",
                   [per_second("context_processor_metric_label_overflow_total",
                               "metric, label", "{{metric}} {{label}}"),
                    per_second("context_processor_metric_label_truncated_total",
                               "metric, label", "cut {{metric}} {{label}}"),
                    per_second("context_processor_measurements_dropped_total", "instance",
                               "dropped {{instance}}")],
                   unit="ops", w=8),
        timeseries("Log-based context events", "OTLP log records per second: received, "
                   "ignored (not context events), and context events by outcome: accepted "
                   "(on their span, or held for it), duplicate (retries), late (their envelope "
                   "was already written), orphaned (their span never came), rejected (no "
                   "trace id and span id).",
                   [per_second("context_processor_log_records_received_total", "transport",
                               "records {{transport}}"),
                    per_second("context_processor_log_records_ignored_total", "instance",
                               "ignored {{instance}}"),
                    per_second("context_processor_log_events_total", "outcome",
                               "events {{outcome}}")], unit="ops", w=8),
        row("Buffer and durability"),
        timeseries("In flight", "Traces, envelopes and spans held while envelopes are "
                   "assembled, and log-based events waiting for their span; the buffer's caps "
                   "are buffer.max_traces, buffer.max_spans and buffer.max_events.",
                   [target(f"sum by (instance) (context_processor_traces_in_flight{{{s}}})",
                           "traces {{instance}}"),
                    target(f"sum by (instance) (context_processor_envelopes_in_flight{{{s}}})",
                           "envelopes {{instance}}"),
                    target(f"sum by (instance) (context_processor_spans_in_flight{{{s}}})",
                           "spans {{instance}}"),
                    target(f"sum by (instance) (context_processor_log_events_waiting{{{s}}})",
                           "waiting events {{instance}}")], w=8),
        timeseries("Queue fill", "Envelopes waiting for the sinks / pipeline.queue_size. At "
                   "100% the receivers answer UNAVAILABLE with RetryInfo.",
                   [target(f"sum by (instance) (context_processor_queue_size{{{s}}}) / "
                           f"sum by (instance) (context_processor_queue_capacity{{{s}}})",
                           "{{instance}}")], unit="percentunit", maximum=1, threshold=0.8, w=8),
        timeseries("Write-ahead log", "Bytes and segment files in the WAL, and spans replayed "
                   "from it at start (0 after a clean stop).",
                   [target(f"sum by (instance) (context_processor_wal_bytes{{{s}}})",
                           "bytes {{instance}}"),
                    target(f"sum by (instance) (context_processor_wal_segments{{{s}}})",
                           "segments {{instance}}"),
                    target(f"sum by (instance) "
                           f"(increase(context_processor_wal_replayed_spans_total{{{s}}}"
                           f"[{RATE}]))", "replayed spans {{instance}}")], unit="short", w=8),
        timeseries("Memory by part", "Bytes each part of memory.max_bytes (--max-memory) holds, "
                   "as a share of its limit: buffer, queue, events, forward, decode_cache, "
                   "remembered. "
                   "Buffer and queue share their limits: near 100% together, the receivers "
                   "answer UNAVAILABLE with RetryInfo.",
                   [target(f"sum by (part) (context_processor_memory_bytes{{{s}}}) / "
                           f"sum by (part) (context_processor_memory_limit_bytes{{{s}}})",
                           "{{part}}")], unit="percentunit", maximum=1, threshold=0.9, w=12),
        timeseries("Memory held", "Bytes held by part (estimated), against the whole "
                   "memory.max_bytes of the instances shown.",
                   [target(f"sum by (part) (context_processor_memory_bytes{{{s}}})",
                           "{{part}}"),
                    target(f"sum(context_processor_memory_limit_bytes{{{s}}})",
                           "memory.max_bytes")], unit="bytes", stack=False, w=12),
        row("Output"),
        timeseries("Partial envelopes by reason", "Envelopes emitted partial per second: "
                   "timeout (spans late), evicted (buffer full), shutdown, missing_events "
                   "(log-based events late), no_envelope_span, incomplete (dropped events or "
                   "attributes).",
                   [per_second("context_processor_partial_envelopes_total", "reason",
                               "{{reason}}")], unit="ops", stack=True, w=8),
        timeseries("Envelopes by status", "Envelopes emitted per second.",
                   [per_second("context_envelopes_total", "instance, status",
                               "{{instance}} {{status}}")], unit="ops", w=8),
        timeseries("Envelope latency", "From an envelope's last span received to its bundle "
                   "written.",
                   [target(f"histogram_quantile({q}, sum by (le) "
                           f"(rate(context_processor_envelope_latency_seconds_bucket{{{s}}}"
                           f"[{RATE}])))", f"p{round(q * 100)}") for q in (0.5, 0.99)],
                   unit="s", w=8),
        timeseries("Bundles written by sink", "Bundles written per second by sink (jsonl, "
                   "otlp_logs, dead_letter).",
                   [per_second("context_processor_bundles_written_total", "sink", "{{sink}}")],
                   unit="ops", w=8),
        timeseries("Sink and rebuild errors", "Failed sink writes (retried; the receivers push "
                   "back meanwhile), rebuild errors (spans go to dead-letter.jsonl), and "
                   "envelopes left out of the bundle store by reason (refused for their "
                   "values, or no room even alone; the JSON Lines file has them).",
                   [per_second("context_processor_sink_errors_total", "sink", "sink {{sink}}"),
                    target(f"sum(rate(context_processor_rebuild_errors_total{{{s}}}[{RATE}]))",
                           "rebuild"),
                    per_second("context_processor_store_left_out_total", "reason",
                               "left out of the store: {{reason}}")], unit="ops", w=8),
        timeseries("Forwarding", "The --forward next hop: requests queued, failed sends, "
                   "requests dropped by reason (a non-retryable code, too_large, shutdown) and "
                   "requests split to fit its limit.",
                   [target(f"sum by (instance) (context_processor_forward_queue_size{{{s}}})",
                           "queued {{instance}}"),
                    per_second("context_processor_forward_errors_total", "instance",
                               "errors/s {{instance}}"),
                    per_second("context_processor_forward_dropped_total", "reason",
                               "dropped/s {{reason}}"),
                    per_second("context_processor_forward_split_total", "instance",
                               "split/s {{instance}}")], unit="short", w=8),
    ]
    variables = [
        datasource_var("datasource", "prometheus", "Prometheus", "prometheus"),
        query_var("job", "Job", "label_values(context_processor_info, job)",
                  multi=True, include_all=True),
        query_var("instance", "Instance",
                  'label_values(context_processor_info{job=~"$job"}, instance)',
                  multi=True, include_all=True),
    ]
    return dashboard(UID_PROCESSOR, "Agent context: processor health",
                     "The context processor's own health: intake, buffer, queue, write-ahead "
                     "log, partial envelopes, sinks and forwarding.", panels, variables)


# --------------------------------------------------------------------------- files


# --------------------------------------------------------------------------- session timeline
# On the bundle store in PostgreSQL (``serve --store postgresql://...``, docs/store.md): one
# conversation turn by turn. Every query here is run against a filled database by
# tests/store/test_store_postgres.py.

PG = {"type": "grafana-postgresql-datasource", "uid": "${pg}"}
UID_SESSION = "agent-context-session"
#: The turns of the chosen conversation, numbered in time order (a CTE every panel starts from).
TURNS_CTE = (
    "WITH turns AS (SELECT e.*, ROW_NUMBER() OVER (ORDER BY e.created_ns, e.context_id) AS turn "
    "FROM envelopes e WHERE e.conversation_id = '${conversation}' "
    "AND e.agent_name IN (${agent:sqlstring}))"
)


def sql_target(sql: str, fmt: str = "table") -> dict[str, Any]:
    return {"datasource": PG, "editorMode": "code", "format": fmt, "rawQuery": True,
            "rawSql": sql}


def sql_panel(kind: str, title: str, description: str, sql: str, *, w: int = 12, h: int = 8,
              unit: str = "short", stack: bool = False, options: dict[str, Any] | None = None,
              overrides: list[dict[str, Any]] | None = None) -> Panel:
    custom: dict[str, Any] = {"stacking": {"mode": "normal" if stack else "none", "group": "A"},
                              "fillOpacity": 80, "lineWidth": 1}
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": PG,
        "targets": [sql_target(sql)],
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom, "thresholds": GREEN_ONLY,
                                     "color": {"mode": "palette-classic"}},
                        "overrides": overrides or []},
        "options": options or {},
        "_size": (w, h),
    }


def _by_turn(sql: str, title: str, description: str, *, unit: str = "short",
             w: int = 12) -> Panel:
    return sql_panel("barchart", title, description, sql, w=w, unit=unit, stack=True, options={
        "xField": "turn", "orientation": "vertical", "stacking": "normal", "showValue": "never",
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"}, "xTickLabelRotation": 0,
        "barWidth": 0.9, "groupWidth": 0.7, "fullHighlight": False,
    })


def session_timeline() -> dict[str, Any]:
    composition = (
        f"{TURNS_CTE} SELECT t.turn::text AS turn, "
        + ", ".join(
            f"COALESCE(SUM(b.tokens) FILTER (WHERE b.context_kind = '{kind}'), 0) AS \"{kind}\""
            for kind in SESSION_KINDS)
        + ", COALESCE(SUM(b.tokens) FILTER (WHERE b.context_kind NOT IN ("
        + ", ".join(f"'{k}'" for k in SESSION_KINDS)
        + ")), 0) AS other FROM turns t LEFT JOIN blocks b ON b.trace_id = t.trace_id AND "
          "b.context_id = t.context_id GROUP BY t.turn ORDER BY t.turn"
    )
    omitted = (
        f"{TURNS_CTE} SELECT t.turn::text AS turn, "
        + ", ".join(f"COUNT(i.item_id) FILTER (WHERE i.omit_reason = '{r}') AS \"{r}\""
                    for r in SESSION_REASONS)
        + ", COUNT(i.item_id) FILTER (WHERE i.omit_reason IS NULL OR i.omit_reason NOT IN ("
        + ", ".join(f"'{r}'" for r in SESSION_REASONS)
        + ")) AS other FROM turns t LEFT JOIN items i ON i.trace_id = t.trace_id AND "
          "i.context_id = t.context_id AND i.state = 'omitted' GROUP BY t.turn ORDER BY t.turn"
    )
    changed = (
        f"{TURNS_CTE} SELECT t.turn::text AS turn, t.truncated_count AS truncated, "
        "t.compacted_count AS compacted, t.blocking_missing_count AS \"blocking gaps\" "
        "FROM turns t ORDER BY t.turn"
    )
    use = (
        f"{TURNS_CTE} SELECT t.turn::text AS turn, t.window_used_tokens AS used, "
        "t.window_max_tokens AS \"limit\", t.overflow_tokens AS overflow FROM turns t "
        "ORDER BY t.turn"
    )
    coverage = (
        f"{TURNS_CTE} SELECT t.turn AS turn, c.method, c.coverage, c.source_count AS sources, "
        "c.tokens_before, c.tokens_after, c.uncovered_sources::text AS \"not covered\", "
        "c.loss_notes::text AS \"loss notes\" FROM turns t JOIN compactions c "
        "ON c.trace_id = t.trace_id AND c.context_id = t.context_id ORDER BY t.turn"
    )
    turns = (
        f"{TURNS_CTE} SELECT t.turn, t.created_at AS time, t.context_id, t.trace_id, "
        "t.status, t.window_used_tokens AS used, t.window_max_tokens AS \"limit\", "
        "t.utilization, t.overflow, t.selected_count AS selected, t.omitted_count AS omitted, "
        "t.truncated_count AS truncated, t.compacted_count AS compacted, "
        "t.blocking_missing_count AS blocking FROM turns t ORDER BY t.turn"
    )
    missing = (
        f"{TURNS_CTE} SELECT t.turn, m.severity, m.needed_for, m.status, m.requested_from, "
        "m.blocked_actions::text AS blocks FROM turns t JOIN missing_context m "
        "ON m.trace_id = t.trace_id AND m.context_id = t.context_id ORDER BY t.turn"
    )
    trace_link = [{"matcher": {"id": "byName", "options": "trace_id"}, "properties": [
        {"id": "links", "value": [{"title": "Open the trace in Jaeger",
                                   "url": "${jaeger_url}/trace/${__value.raw}",
                                   "targetBlank": True}]}]}]
    panels: list[Panel] = [
        row("Window per turn"),
        _by_turn(composition, "Window composition per turn",
                 "Tokens in the assembled context by context kind, one bar per turn.",
                 unit="none", w=16),
        sql_panel("barchart", "Window use against its limit",
                  "Tokens used, the window's limit and the overflow per turn.", use, w=8,
                  options={"xField": "turn", "orientation": "vertical", "stacking": "none",
                           "showValue": "never", "barWidth": 0.9, "groupWidth": 0.7,
                           "legend": {"displayMode": "list", "placement": "bottom",
                                      "showLegend": True},
                           "tooltip": {"mode": "multi", "sort": "none"}}),
        row("What was left out or cut"),
        _by_turn(omitted, "Omitted items per turn, by reason",
                 "Items the selection left out, by the reason it gave."),
        _by_turn(changed, "Truncated, compacted and blocking gaps per turn",
                 "Items cut by a budget, items folded into a summary, and blocking missing "
                 "context."),
        sql_panel("table", "Compactions: coverage and loss",
                  "Each compaction of the conversation: how much of its sources the summary "
                  "covers, which it does not, and the loss it noted.", coverage, w=24, h=6,
                  unit="none", overrides=[{"matcher": {"id": "byName", "options": "coverage"},
                                           "properties": [{"id": "unit", "value": "percentunit"},
                                                          {"id": "thresholds",
                                                           "value": COVERAGE},
                                                          {"id": "custom.cellOptions",
                                                           "value": {"type": "color-text"}}]}]),
        row("Turns"),
        sql_panel("table", "Turns", "Every envelope of the conversation in time order; the "
                  "trace id opens the trace in Jaeger.", turns, w=24, h=8, unit="none",
                  overrides=trace_link),
        sql_panel("table", "Missing context", "What the agent knew it lacked, per turn.",
                  missing, w=24, h=5, unit="none"),
    ]
    variables = [
        datasource_var("pg", "grafana-postgresql-datasource", "Bundle store", "agent-context-pg"),
        {
            "name": "agent", "label": "Agent", "type": "query", "datasource": PG,
            "definition": AGENT_VAR_SQL, "query": AGENT_VAR_SQL, "refresh": 2, "regex": "",
            "sort": 1, "hide": 0, "multi": True, "includeAll": True,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "skipUrlSync": False,
        },
        {
            "name": "conversation", "label": "Conversation", "type": "query", "datasource": PG,
            "definition": CONVERSATION_VAR_SQL, "query": CONVERSATION_VAR_SQL, "refresh": 2,
            "regex": "", "sort": 0, "hide": 0, "multi": False, "includeAll": False,
            "current": {}, "options": [], "skipUrlSync": False,
        },
        textbox_var("jaeger_url", "Jaeger UI", "http://localhost:16686"),
    ]
    model = dashboard(UID_SESSION, "Agent context: session timeline",
                      "One conversation turn by turn, from the bundle store in PostgreSQL: what "
                      "filled the window, what was omitted, truncated and compacted, and what "
                      "the agent knew it lacked.", panels, variables)
    model["annotations"] = {"list": [BUILTIN_ANNOTATION]}
    model["refresh"] = "1m"
    model["time"] = {"from": "now-24h", "to": "now"}
    return model


#: Kinds and reasons given their own series (the rest are summed as "other").
SESSION_KINDS = ("system_prompt", "developer_instruction", "session_history", "user_message",
                 "thread_summary", "computed_summary", "working_memory", "durable_memory",
                 "document_excerpt", "retrieval_result", "tool_result")
SESSION_REASONS = ("budget", "low_relevance", "duplicate_coverage", "stale_source",
                   "privacy_risk", "policy_block")
AGENT_VAR_SQL = ("SELECT DISTINCT agent_name FROM envelopes WHERE agent_name IS NOT NULL "
                 "AND $__timeFilter(created_at) ORDER BY 1")
CONVERSATION_VAR_SQL = (
    "SELECT conversation_id FROM envelopes WHERE conversation_id IS NOT NULL "
    "AND agent_name IN (${agent:sqlstring}) AND $__timeFilter(created_at) "
    "GROUP BY conversation_id ORDER BY MAX(created_ns) DESC LIMIT 500")


def build() -> dict[str, dict[str, Any]]:
    """File name -> dashboard model."""
    models = {
        "context-overview.json": overview(),
        "agent-drilldown.json": agent_drilldown(),
        "processor-health.json": processor_health(),
    }
    unknown = sorted(unknown_contract_metrics(json.dumps(models)))
    if unknown:
        raise SystemExit(f"queries name metrics the contract table lacks: {unknown}")
    # SQL on the bundle store, not PromQL: its column names are not metric names
    models["session-timeline.json"] = session_timeline()
    return models


def unknown_contract_metrics(text: str) -> set[str]:
    """Contract metric names (not ``context_processor_*``) in ``text`` that the table lacks."""
    out = set()
    for name in _SERIES.findall(text):
        if name.startswith("context_processor_"):
            continue
        base = next((name[:-len(s)] for s in _SUFFIXES if name.endswith(s)), name)
        if name not in CONTRACT_METRICS and base not in CONTRACT_METRICS:
            out.add(name)
    return out


def render(model: dict[str, Any]) -> str:
    return json.dumps(model, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed dashboard differs from the generated one")
    args = parser.parse_args(argv)
    stale = []
    for name, model in build().items():
        path = OUT_DIR / name
        text = render(model)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (run dashboards/grafana/generate.py): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
