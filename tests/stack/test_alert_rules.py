"""The Prometheus alert rules: promtool check/test, contract names, runbooks, and that the
unit tests really tell a working rule from a broken one."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from stack_support import (
    CONTRACT_SERIES,
    OPERATIONS_DOC,
    PROMETHEUS,
    RULE_FILES,
    RULE_TEST_FILES,
    load_rules,
    markdown_anchors,
    metric_names,
)

from otel_agent_context import _semconv as S

SEVERITIES = {"critical", "warning", "info"}


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: scripts/test installs Debian's prometheus package"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_rule_and_test_files_exist():
    assert RULE_FILES, "no rule files under dashboards/prometheus/rules"
    assert RULE_TEST_FILES, "no promtool test files under dashboards/prometheus/tests"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules(path):
    result = promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", RULE_TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(path):
    result = promtool("test", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_prometheus_config_of_the_stack_is_valid():
    result = promtool("check", "config", PROMETHEUS / "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    # The config loads the rule files the tests cover.
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout, result.stdout


def test_alert_names_are_the_contracts():
    names = {r.name for r in load_rules() if "alert" in r.raw}
    assert names == set(S.ALERT_NAMES)


def test_every_alert_has_severity_summary_description_and_a_runbook_that_exists():
    anchors = markdown_anchors(OPERATIONS_DOC)
    for rule in load_rules():
        labels, annotations = rule.raw.get("labels", {}), rule.raw.get("annotations", {})
        assert labels.get("severity") in SEVERITIES, rule.name
        for key in ("summary", "description", "runbook_url"):
            assert annotations.get(key, "").strip(), f"{rule.name}: no {key}"
        url = annotations["runbook_url"]
        doc, _, anchor = url.partition("#")
        assert doc == "docs/operations.md", url
        assert anchor == rule.name.lower(), url
        assert anchor in anchors, f"{url}: no such heading in docs/operations.md"


def test_rules_use_only_contract_metrics():
    for rule in load_rules():
        names = metric_names(rule.expr)
        assert names, rule.name
        assert names <= CONTRACT_SERIES, f"{rule.name}: {sorted(names - CONTRACT_SERIES)}"


def test_every_alert_is_unit_tested_firing_and_quiet():
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TEST_FILES:
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing >= set(S.ALERT_NAMES), sorted(set(S.ALERT_NAMES) - firing)
    assert quiet >= set(S.ALERT_NAMES), sorted(set(S.ALERT_NAMES) - quiet)
    # Both kinds of AgentContextCompactionLoss (coverage, uncovered sources) are shown firing.
    losses = set()
    for path in RULE_TEST_FILES:
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    if check["alertname"] == "AgentContextCompactionLoss":
                        losses.add(alert["exp_labels"]["loss"])
    assert losses == {"coverage", "uncovered_sources"}


# Mutations of the rules that the unit tests must catch: each one is a plausible mistake.
# name -> (regex, replacement, how many occurrences to replace; 0 = all)
MUTATIONS = {
    "first event of a new series missed (increase() only)": (
        r"\n\s+or\n\s+\(context_truncations_total unless context_truncations_total offset 5m\)"
        r" > 0", "", 0),
    "blocking severity filter dropped": (r'\{severity="blocking"\}', "", 0),
    "overflow threshold off by ten": (r"\) > 0\.10\n", ") > 1.0\n", 0),
    "overflow minimum volume dropped": (
        r"\n\s+and\n\s+sum by \(agent, target\) \(increase\(context_budget_utilization_ratio_count"
        r"\[10m\]\)\) >= 10", "", 0),
    "coverage compared the wrong way": (r"\) < 0\.80", ") > 0.80", 0),
    "partial share per instance lost": (r"sum by \(job, instance\)", "sum", 0),
    "for clause of the overflow alert dropped": (r"\n        for: 10m\n", "\n", 1),
    "for clause of the partial-envelope alert dropped": (
        r"(envelopes_total\[10m\]\)\)\n          \) > 0\.05\n)        for: 10m\n", r"\1", 0),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_unit_tests_catch_a_broken_rule(mutation, tmp_path):
    pattern, replacement, count = MUTATIONS[mutation]
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    for path in RULE_FILES:
        text = path.read_text(encoding="utf-8")
        mutated = re.sub(pattern, replacement, text, count=count)
        (tmp_path / "rules" / path.name).write_text(mutated, encoding="utf-8")
    changed = [p for p in RULE_FILES
               if (tmp_path / "rules" / p.name).read_text(encoding="utf-8")
               != p.read_text(encoding="utf-8")]
    assert changed, f"mutation {mutation!r} no longer applies to the rules: update MUTATIONS"
    for path in RULE_TEST_FILES:
        (tmp_path / "tests" / path.name).write_text(path.read_text(encoding="utf-8"),
                                                    encoding="utf-8")
    check = promtool("check", "rules", *(tmp_path / "rules").iterdir())
    assert check.returncode == 0, check.stdout + check.stderr  # still a valid rule...
    result = promtool("test", "rules", *(tmp_path / "tests").iterdir())
    assert result.returncode != 0, f"the unit tests did not notice: {mutation}"  # ...but wrong
    assert "FAILED" in result.stdout + result.stderr
