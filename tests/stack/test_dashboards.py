"""The Grafana dashboards and provisioning files, offline: structure, datasources, metric names,
coverage of the contract, links. ``test_live_prometheus.py`` runs their queries for real."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from itertools import combinations

import pytest
import yaml
from stack_support import (
    COMPOSE_FILE,
    CONTRACT_SERIES,
    DASHBOARD_DIR,
    GRAFANA,
    OPERATIONS_DOC,
    PROCESSOR_SERIES,
    PROMETHEUS_SYNTHETIC,
    PROVISIONING,
    all_panels,
    dashboard_queries,
    load_dashboards,
    metric_names,
    variable_queries,
)

from otel_agent_context import _semconv as S

DASHBOARDS = load_dashboards()
OVERVIEW = DASHBOARDS["context-overview.json"]
DRILLDOWN = DASHBOARDS["agent-drilldown.json"]
PROCESSOR = DASHBOARDS["processor-health.json"]
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}


def test_three_prometheus_dashboards_and_the_session_dashboard_are_committed():
    assert set(DASHBOARDS) == {"context-overview.json", "agent-drilldown.json",
                               "processor-health.json"}
    assert set(load_dashboards(sql=True)) == {"session-timeline.json"}


def test_committed_json_is_what_the_generator_writes():
    result = subprocess.run([sys.executable, str(GRAFANA / "generate.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_model(name):
    dash = DASHBOARDS[name]
    json.loads((DASHBOARD_DIR / name).read_text(encoding="utf-8"))  # parses as plain JSON
    assert dash["schemaVersion"] == 42
    assert dash["uid"] and len(dash["uid"]) <= 40
    assert dash["title"] and "agent-context" in dash["tags"]
    panels = list(all_panels(dash))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert all(isinstance(i, int) and i > 0 for i in ids)
    for panel in panels:
        assert panel["title"], panel["id"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
    # No two panels overlap on the grid.
    for a, b in combinations(panels, 2):
        pa, pb = a["gridPos"], b["gridPos"]
        overlap_x = pa["x"] < pb["x"] + pb["w"] and pb["x"] < pa["x"] + pa["w"]
        overlap_y = pa["y"] < pb["y"] + pb["h"] and pb["y"] < pa["y"] + pa["h"]
        assert not (overlap_x and overlap_y), (a["title"], b["title"])


def test_dashboard_uids_are_unique():
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_target_has_the_datasource_variable_and_a_ref_id(name):
    dash = DASHBOARDS[name]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    targets = 0
    for panel in all_panels(dash):
        if panel["type"] == "row":
            assert not panel.get("targets")
            continue
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        refs = [t.get("refId") for t in panel["targets"]]
        assert panel["targets"], f"{panel['title']}: no query"
        assert all(refs) and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            targets += 1
            assert t["datasource"] == DATASOURCE_REF, (panel["title"], t["refId"])
            assert t["expr"].strip(), (panel["title"], t["refId"])
    for ann in dash["annotations"]["list"]:
        if "expr" in ann:
            assert ann["datasource"] == DATASOURCE_REF
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE_REF, var["name"]
    assert targets > 0


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_variable_an_expression_uses_is_defined(name):
    dash = DASHBOARDS[name]
    defined = {v["name"] for v in dash["templating"]["list"]}
    builtin = {"__rate_interval", "__range", "__interval", "__range_s"}
    for query in dashboard_queries({name: dash}):
        for var in re.findall(r"\$\{?(\w+)", query.expr):
            assert var in defined | builtin, f"{query.where}: ${var} is not defined"
    for _, selector, _ in variable_queries(dash):
        for var in re.findall(r"\$\{?(\w+)", selector or ""):
            assert var in defined, var


def test_every_metric_a_dashboard_names_is_a_contract_or_processor_metric():
    allowed = CONTRACT_SERIES | PROCESSOR_SERIES | PROMETHEUS_SYNTHETIC
    for query in dashboard_queries():
        names = metric_names(query.expr)
        assert names, f"{query.dashboard} {query.where}: no metric"
        unknown = names - allowed
        assert not unknown, f"{query.dashboard} {query.where}: {sorted(unknown)}"
    for dash in DASHBOARDS.values():
        for var, selector, _ in variable_queries(dash):
            assert metric_names(selector or "") <= allowed, var


def test_overview_shows_every_contract_metric_and_processor_health_every_self_metric():
    overview = set().union(*(metric_names(q.expr)
                             for q in dashboard_queries({"o": OVERVIEW})))
    for name in S.PROMETHEUS_NAMES.values():
        assert any(n == name or n.startswith(name + "_") for n in overview), name
    health = set().union(*(metric_names(q.expr) for q in dashboard_queries({"p": PROCESSOR})))
    missing = {n for n in PROCESSOR_SERIES
               if not n.endswith(("_sum", "_count")) and n not in health}
    assert not missing, sorted(missing)


def test_panels_the_issue_asks_for_exist():
    titles = {p["title"] for p in all_panels(OVERVIEW)}
    for title in ("Envelopes by scope and status", "Budget utilization p50 / p95 / p99",
                  "Budget overflow share", "Truncations by strategy", "Truncated tokens",
                  "Omitted items by reason", "Omitted items by kind and reason",
                  "Omitted tokens by reason", "Compaction coverage",
                  "Uncovered sources and loss notes", "Missing context by severity",
                  "Injections by point", "Selected but never injected"):
        assert title in titles, title
    titles = {p["title"] for p in all_panels(PROCESSOR)}
    for title in ("Spans by path", "Spans rejected by transport", "In flight",
                  "Partial envelopes by reason", "Queue fill", "Write-ahead log",
                  "Sink and rebuild errors"):
        assert title in titles, title


def test_histogram_panels_carry_exemplars():
    for name, dash in DASHBOARDS.items():
        for panel in all_panels(dash):
            for t in panel.get("targets", []):
                contract_histogram = re.search(
                    r"context_(budget_utilization|compaction_coverage)_ratio_bucket", t["expr"])
                if contract_histogram:
                    assert t["exemplar"] is True, (name, panel["title"], t["refId"])
    heatmaps = [p for p in all_panels(DRILLDOWN) if p["type"] == "heatmap"]
    assert {p["title"] for p in heatmaps} == {"Budget utilization", "Compaction coverage"}
    for panel in heatmaps:
        assert panel["targets"][0]["format"] == "heatmap"
        assert panel["options"]["calculate"] is False


def test_drilldown_is_by_agent_and_overview_links_to_it():
    variables = {v["name"]: v for v in DRILLDOWN["templating"]["list"]}
    agent = variables["agent"]
    assert agent["type"] == "query" and agent["multi"] is False and not agent["includeAll"]
    for query in dashboard_queries({"d": DRILLDOWN}):
        if "ALERTS" in query.expr and "alertstate" in query.expr:
            continue  # the alert annotation spans all agents
        if "context_injections_total" in query.expr:
            continue
        assert 'agent="$agent"' in query.expr, query.where
    links = [link for p in all_panels(OVERVIEW)
             for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])]
    assert links
    for link in links:
        assert link["url"].startswith(f"/d/{DRILLDOWN['uid']}/")
        assert "var-agent=${__field.labels.agent}" in link["url"]


def test_datasource_provisioning_fixes_uids_and_links_exemplars_to_jaeger():
    doc = yaml.safe_load((PROVISIONING / "datasources" / "agent-context.yaml").read_text())
    by_uid = {d["uid"]: d for d in doc["datasources"]}
    assert by_uid["agent-context-pg"]["type"] == "grafana-postgresql-datasource"
    assert by_uid["prometheus"]["type"] == "prometheus"
    assert by_uid["jaeger"]["type"] == "jaeger"
    assert by_uid["prometheus"]["isDefault"] is True
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert all(d["name"] == "trace_id" for d in destinations)  # the processor's exemplar label
    assert {d.get("datasourceUid") for d in destinations} >= {"jaeger"}
    # Grafana expands ${...} in provisioning files from its environment: its own link
    # variables must be escaped as $${...}, or the link loses the trace id.
    def strings(node):
        if isinstance(node, dict):
            for value in node.values():
                yield from strings(value)
        elif isinstance(node, list):
            for value in node:
                yield from strings(value)
        elif isinstance(node, str):
            yield node

    for path in PROVISIONING.rglob("*.yaml"):
        for value in strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            assert not re.search(r"(?<!\$)\$\{__", value), (path, value)
    urls = [d["url"] for d in destinations if "url" in d]
    assert urls and all(u.endswith("/trace/$${__value.raw}") for u in urls)
    # Dashboards' default datasource is the provisioned uid.
    for dash in DASHBOARDS.values():
        var = next(v for v in dash["templating"]["list"] if v["name"] == "datasource")
        assert var["current"]["value"] == "prometheus"


def test_dashboard_provider_reads_the_folder_compose_mounts():
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "agent-context.yaml").read_text())
    (provider,) = doc["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./dashboards/grafana/dashboards:{path}:ro" in mounts
    assert "./dashboards/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    environment = compose["services"]["grafana"]["environment"]
    home = environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/context-overview.json"


def test_panels_the_runbooks_point_at_exist():
    """docs/operations.md names panels in italics: each one is a real panel, dashboard,
    folder or exemplar link, so a renamed panel cannot leave a runbook pointing nowhere."""
    text = OPERATIONS_DOC.read_text(encoding="utf-8")
    named = {" ".join(m.split())
             for m in re.findall(r"(?<![*\w])\*([A-Z][^*\n]*(?:\n[^*\n]+)?)\*(?![*\w])", text)}
    known = {d["title"] for d in DASHBOARDS.values()}
    known |= {p["title"] for d in DASHBOARDS.values() for p in all_panels(d)}
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "agent-context.yaml").read_text())
    known.add(provider["providers"][0]["folder"])
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "agent-context.yaml").read_text())
    prometheus = next(d for d in datasources["datasources"] if d["type"] == "prometheus")
    known |= {d["urlDisplayLabel"] for d in prometheus["jsonData"]["exemplarTraceIdDestinations"]}
    assert len(named) > 20
    assert named <= known, sorted(named - known)


def test_the_generator_refuses_a_contract_metric_the_table_lacks() -> None:
    spec = importlib.util.spec_from_file_location("generate_dashboards", GRAFANA / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    known = 'sum(rate(context_items_omitted_total{reason="budget"}[5m]))'
    assert generate.unknown_contract_metrics(known) == set()
    assert generate.unknown_contract_metrics(
        "rate(context_budget_utilization_ratio_bucket[5m]) + context_itemz_omitted_total"
        " + context_processor_anything_total") == {"context_itemz_omitted_total"}
