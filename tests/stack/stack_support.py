"""Shared helpers of the stack tests: paths, the dashboards' and rules' PromQL, metric names.

Kept free of pytest so that the helpers can be read (and reused) on their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from otel_agent_context import _semconv as S

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
GRAFANA = DASHBOARDS / "grafana"
DASHBOARD_DIR = GRAFANA / "dashboards"
PROVISIONING = GRAFANA / "provisioning"
PROMETHEUS = DASHBOARDS / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
RULE_TEST_FILES = sorted((PROMETHEUS / "tests").glob("*.yml"))
COLLECTOR = REPO / "collector"
COMPOSE_FILE = REPO / "docker-compose.yml"
OPERATIONS_DOC = REPO / "docs" / "operations.md"

HISTOGRAMS = {S.PROMETHEUS_NAMES[S.METRIC_BUDGET_UTILIZATION],
              S.PROMETHEUS_NAMES[S.METRIC_COMPACTION_COVERAGE]}

#: Contract section 3, as exposed: counters by name, histograms by their three series.
CONTRACT_SERIES = frozenset(
    {n for n in S.PROMETHEUS_NAMES.values() if n not in HISTOGRAMS}
    | {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)


def _processor_series() -> frozenset[str]:
    from otel_agent_context.processor._metrics import SELF_METRICS

    out = set()
    for metric in SELF_METRICS:
        if metric.kind == "histogram":
            out |= {f"{metric.name}{suffix}" for suffix in ("_bucket", "_sum", "_count")}
        else:
            out.add(metric.name)
    return frozenset(out)


#: The processor's own health metrics (``context_processor_*``), as exposed.
PROCESSOR_SERIES = _processor_series()

#: Series Prometheus makes itself; dashboards may use these besides the processor's metrics.
PROMETHEUS_SYNTHETIC = frozenset({"up", "ALERTS"})

# ------------------------------------------------------------------------------- PromQL

_FUNCTIONS_AND_KEYWORDS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "days_in_month", "day_of_month", "day_of_week", "day_of_year", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
    "scalar", "sgn", "sin", "sinh", "sort", "sort_desc", "sort_by_label", "sort_by_label_desc",
    "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "vector", "year", "sum", "min", "max", "avg", "group", "stddev", "stdvar",
    "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio", "by",
    "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "atan2", "inf", "nan",
})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()")
_NUMBER_LIKE = re.compile(r"^(?:[0-9].*|e[0-9]+)$")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a light scanner, not a full parser).

    Strings, label matchers, ranges and grouping clauses are removed first; what is left and is
    neither a function (followed by ``(``), an aggregation, a keyword nor a number is a metric
    name. ``{__name__=...}`` selectors are not supported and are reported as an error.
    """
    if "__name__" in expr:
        raise ValueError(f"selectors by __name__ are not supported: {expr}")
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables left outside matchers
    names = set()
    for match in _IDENT.finditer(text):
        name = match.group(1)
        if name in _FUNCTIONS_AND_KEYWORDS or _NUMBER_LIKE.match(name):
            continue
        names.add(name)
    return names


def family(series: str, histograms: frozenset[str] | set[str] = frozenset(HISTOGRAMS)) -> str:
    """``context_budget_utilization_ratio_bucket`` -> ``context_budget_utilization_ratio``;
    a counter's family is its name without ``_total``, as the exposition's TYPE line says."""
    for suffix in ("_bucket", "_sum", "_count"):
        if series.endswith(suffix) and series[: -len(suffix)] in histograms:
            return series[: -len(suffix)]
    return series.removesuffix("_total")


# ------------------------------------------------------------------------------- dashboards


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a dashboard: a panel target, an annotation or a variable."""

    dashboard: str  # file name
    where: str  # "panel 12 'Budget overflow share' refId A", "annotation ...", "variable agent"
    expr: str
    core: bool = False


#: The dashboard on the bundle store in PostgreSQL (SQL, not PromQL): tests/store checks it.
SQL_DASHBOARDS = frozenset({"session-timeline.json"})


def load_dashboards(*, sql: bool = False) -> dict[str, dict[str, Any]]:
    """The Prometheus dashboards (``sql=True``: the bundle store's instead)."""
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(DASHBOARD_DIR.glob("*.json")) if (p.name in SQL_DASHBOARDS) == sql}


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep their panels inside


def dashboard_queries(dashboards: dict[str, dict[str, Any]] | None = None) -> list[Query]:
    """Every PromQL expression of every dashboard (panel targets and annotations)."""
    out = []
    for name, dash in (dashboards or load_dashboards()).items():
        for panel in all_panels(dash):
            for t in panel.get("targets", []):
                out.append(Query(name, f"panel {panel['id']} {panel['title']!r} refId "
                                       f"{t.get('refId')}", t["expr"]))
        for ann in dash.get("annotations", {}).get("list", []):
            if ann.get("expr"):
                out.append(Query(name, f"annotation {ann['name']!r}", ann["expr"]))
    return out


_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$")


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """(variable name, selector or None, label) of every ``label_values`` query variable."""
    out = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = _LABEL_VALUES.match(query)
        if match is None:
            raise ValueError(f"variable {var['name']}: unsupported query {query!r}")
        out.append((var["name"], match.group("selector"), match.group("label")))
    return out


# ------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    file: str
    name: str  # alert or record name
    expr: str
    raw: dict[str, Any]


def load_rules() -> list[Rule]:
    out = []
    for path in RULE_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["groups"]:
            for rule in group["rules"]:
                out.append(Rule(path.name, rule.get("alert") or rule.get("record"), rule["expr"],
                                rule))
    return out


def markdown_anchors(path: Path) -> set[str]:
    """GitHub-style anchors of a Markdown file's headings (plus explicit <a id=...>)."""
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = heading.group(1).strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            anchors.add(text.replace(" ", "-"))
        for explicit in re.findall(r'<a (?:id|name)="([^"]+)"', line):
            anchors.add(explicit)
    return anchors
