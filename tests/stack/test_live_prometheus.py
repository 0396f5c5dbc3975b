"""A real Prometheus scrapes a real processor fed by the demo agent; then every PromQL expression
of every dashboard panel, annotation and variable, and every alert rule, runs against it.

Everything listens on 127.0.0.1 and free ports; every wait is bounded; the processes are
stopped at the end whatever happens. Needs Debian's ``prometheus`` (scripts/test installs it).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from stack_support import (
    PROMETHEUS_SYNTHETIC,
    RULE_FILES,
    all_panels,
    dashboard_queries,
    load_dashboards,
    load_rules,
    metric_names,
    variable_queries,
)

from otel_agent_context import _semconv as S

SCRAPE = 1  # seconds; Prometheus's scrape and rule evaluation interval here
JOB = "agent-context-processor"
DEMO_AGENT = "support-agent"
DEMO_TURNS = 10  # per run; two runs, so every series exists before it is incremented again

#: Grafana's variables as the test sets them: windows that span the demo's traffic.
BUILTINS = {"__rate_interval": "1m", "__range": "5m", "__interval": f"{SCRAPE}s",
            "__range_s": "300"}

#: Panels that must show data from the demo (title -> refIds), beyond "the query runs".
CORE_PANELS = {
    ("context-overview.json", "Budget overflow share"): "A",
    ("context-overview.json", "Omitted items by reason"): "A",
    ("context-overview.json", "Omitted items by kind and reason"): "A",
    ("context-overview.json", "Compaction coverage"): "A",
    ("context-overview.json", "Missing context by severity"): "A",
    ("context-overview.json", "Selected but never injected"): "A",
    ("context-overview.json", "Never-injected share"): "A",
    ("agent-drilldown.json", "Budget overflow share"): "A",
    ("agent-drilldown.json", "Blocking missing context"): "A",
    ("agent-drilldown.json", "Mean compaction coverage"): "A",
    ("agent-drilldown.json", "Selected but never injected by kind"): "A",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float,
             procs: list[subprocess.Popen[Any]] = ()) -> Any:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args[0]} exited with {proc.returncode} while waiting for "
                            f"{what}: {read_log(proc)}")
        try:
            last = check()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def read_log(proc: subprocess.Popen[Any]) -> str:
    path = getattr(proc, "log_path", None)
    return Path(path).read_text(encoding="utf-8", errors="replace")[-4000:] if path else ""


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
        return response.read()


def start(argv: list[str], log_path: Path, **kwargs: Any) -> subprocess.Popen[Any]:
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, **kwargs)
    proc.log_path = log_path  # type: ignore[attr-defined]
    proc.log_file = log  # type: ignore[attr-defined]
    return proc


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    proc.log_file.close()  # type: ignore[attr-defined]


@dataclass
class Stack:
    prometheus: str  # base URL
    metrics_url: str  # the processor's /metrics
    eval_time: float
    agent: str

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            body = http_get(f"{self.prometheus}{path}?{query}", timeout=10)
        except urllib.error.HTTPError as exc:  # 400/422: a bad expression
            body = exc.read()
        reply = json.loads(body)
        return reply

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("/api/v1/query", query=expr, time=f"{self.eval_time:.3f}")


def demo(grpc_port: int, log_path: Path, env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "otel_agent_context", "demo",
            "--endpoint", f"http://127.0.0.1:{grpc_port}", "--turns", str(DEMO_TURNS)]
    with open(log_path, "ab") as log:
        result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=90, env=env)
    assert result.returncode == 0, Path(log_path).read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_bin = shutil.which("prometheus")
    assert prometheus_bin, "prometheus is missing: scripts/test installs Debian's prometheus"
    tmp = tmp_path_factory.mktemp("live-stack")
    grpc, http, metrics, web = (free_port() for _ in range(4))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    procs: list[subprocess.Popen[Any]] = []
    try:
        processor = start([sys.executable, "-m", "otel_agent_context", "serve",
                           "--otlp-grpc", f"127.0.0.1:{grpc}", "--otlp-http", f"127.0.0.1:{http}",
                           "--metrics", f"127.0.0.1:{metrics}", "--out", str(tmp / "out"),
                           "--log-level", "warning"],
                          tmp / "processor.log", env=env, cwd=tmp)
        procs.append(processor)
        wait_for("the processor's /readyz",
                 lambda: http_get(f"http://127.0.0.1:{metrics}/readyz") is not None, 30, procs)

        config = {
            "global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": f"{SCRAPE}s"},
            "rule_files": [str(p) for p in RULE_FILES],
            "scrape_configs": [{"job_name": JOB,
                                "static_configs": [{"targets": [f"127.0.0.1:{metrics}"]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        prometheus = start([prometheus_bin, f"--config.file={tmp / 'prometheus.yml'}",
                            f"--storage.tsdb.path={tmp / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{web}",
                            "--enable-feature=exemplar-storage", "--log.level=warn"],
                           tmp / "prometheus.log", cwd=tmp)
        procs.append(prometheus)
        base = f"http://127.0.0.1:{web}"
        stack = Stack(base, f"http://127.0.0.1:{metrics}/metrics", 0.0, DEMO_AGENT)

        def target_up() -> bool:
            targets = stack.api("/api/v1/targets")["data"]["activeTargets"]
            return any(t["health"] == "up" for t in targets)

        wait_for("Prometheus to scrape the processor", target_up, 30, procs)

        # Two runs with the same seed: the second increments every series the first created,
        # so that rate() and increase() over the test's windows see the demo's events (a
        # series' first sample already holds its first events, which increase() cannot see).
        demo(grpc, tmp / "demo.log", env)
        stack.eval_time = time.time()

        def envelopes_at_least(n: int) -> Callable[[], bool]:
            def check() -> bool:
                stack.eval_time = time.time()
                result = stack.query("sum(context_envelopes_total)")["data"]["result"]
                return bool(result) and float(result[0]["value"][1]) >= n
            return check

        wait_for(f"{DEMO_TURNS} envelopes in Prometheus", envelopes_at_least(DEMO_TURNS), 60,
                 procs)
        time.sleep(2 * SCRAPE)
        demo(grpc, tmp / "demo.log", env)
        wait_for(f"{2 * DEMO_TURNS} envelopes in Prometheus", envelopes_at_least(2 * DEMO_TURNS),
                 60, procs)
        time.sleep(3 * SCRAPE)  # a few more samples and rule evaluations after the last event
        stack.eval_time = time.time()
        yield stack
    finally:
        for proc in reversed(procs):
            stop(proc)


def expand(expr: str, values: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"no test value for ${name} in {expr}"
        return values[name]

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", replace, expr)
    assert "$" not in out, out
    return out


def dashboard_values(dashboard: dict[str, Any], stack: Stack) -> dict[str, str]:
    """Variable values the way Grafana would pick them: from the live label values."""
    values = dict(BUILTINS)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "textbox":
            values[var["name"]] = var["query"]
    for name, selector, label in variable_queries(dashboard):
        params: dict[str, Any] = {}
        if selector:
            params["match[]"] = expand(selector, values)
        reply = stack.api(f"/api/v1/label/{label}/values", **params)
        assert reply["status"] == "success", reply
        options = reply["data"]
        assert options, f"variable {name}: label_values({selector}, {label}) is empty"
        var = next(v for v in dashboard["templating"]["list"] if v["name"] == name)
        if name == "agent":
            assert stack.agent in options, options
        if var.get("includeAll"):
            values[name] = var.get("allValue") or "|".join(options)
        else:
            values[name] = stack.agent if name == "agent" else options[0]
    return values


def finite_values(result: list[dict[str, Any]]) -> list[float]:
    out = []
    for series in result:
        for _, value in ([series["value"]] if "value" in series else series["values"]):
            number = float(value)
            if not math.isnan(number) and not math.isinf(number):
                out.append(number)
    return out


def test_every_dashboard_expression_runs(stack):
    dashboards = load_dashboards()
    failures = []
    ran = 0
    for name, dashboard in dashboards.items():
        values = dashboard_values(dashboard, stack)
        for query in dashboard_queries({name: dashboard}):
            reply = stack.query(expand(query.expr, values))
            ran += 1
            if reply.get("status") != "success":
                failures.append(f"{name} {query.where}: {reply.get('error')}")
    assert not failures, "\n".join(failures)
    assert ran > 60


def test_core_panels_show_the_demos_data(stack):
    dashboards = load_dashboards()
    seen = set()
    for name, dashboard in dashboards.items():
        values = dashboard_values(dashboard, stack)
        for panel in all_panels(dashboard):
            ref = CORE_PANELS.get((name, panel["title"]))
            if ref is None:
                continue
            seen.add((name, panel["title"]))
            target = next(t for t in panel["targets"] if t["refId"] == ref)
            reply = stack.query(expand(target["expr"], values))
            assert reply["status"] == "success", reply
            numbers = finite_values(reply["data"]["result"])
            assert numbers and max(numbers) > 0, \
                f"{name} {panel['title']!r}: no data ({reply['data']['result']})"
            if "coverage" in panel["title"].lower():
                assert all(0 < n <= 1 for n in numbers), numbers
    assert seen == set(CORE_PANELS), sorted(set(CORE_PANELS) - seen)
    # Omissions come with their reasons, blocking gaps with their severity.
    stack_query = stack.query
    reasons = {s["metric"]["reason"] for s in stack_query(
        "sum by (reason) (increase(context_items_omitted_total[5m])) > 0")["data"]["result"]}
    assert {"budget", "low_relevance"} <= reasons, reasons
    severities = {s["metric"]["severity"] for s in stack_query(
        "sum by (severity) (context_missing_detected_total)")["data"]["result"]}
    assert "blocking" in severities


def test_every_alert_rule_expression_runs_and_the_rules_evaluate(stack):
    for rule in load_rules():
        reply = stack.query(rule.expr)
        assert reply["status"] == "success", f"{rule.name}: {reply.get('error')}"

    def evaluated() -> list[dict[str, Any]]:
        groups = stack.api("/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        ok = rules and all(r["health"] == "ok" and r.get("lastEvaluation", "").startswith("2")
                           for r in rules)
        return rules if ok else []

    rules = wait_for("every rule evaluated without error", evaluated, 30)
    assert {r["name"] for r in rules} == set(S.ALERT_NAMES)
    state: dict[str, str] = {}
    for r in rules:  # AgentContextCompactionLoss has two rules: firing if either fires
        firing = "firing" in (state.get(r["name"]), r["state"])
        state[r["name"]] = "firing" if firing else r["state"]
    # The demo truncates history and has blocking gaps: those alerts fire on real data.
    assert state["AgentContextTruncation"] == "firing", state
    assert state["AgentContextBlockingMissing"] == "firing", state


def test_histograms_carry_trace_id_exemplars(stack):
    reply = stack.api("/api/v1/query_exemplars",
                      query="context_budget_utilization_ratio_bucket",
                      start=f"{stack.eval_time - 600:.3f}", end=f"{stack.eval_time:.3f}")
    assert reply["status"] == "success", reply
    exemplars = [e for series in reply["data"] for e in series["exemplars"]]
    assert exemplars, "no exemplars: Grafana's links from panels to Jaeger would have nothing"
    for exemplar in exemplars:
        assert re.fullmatch(r"[0-9a-f]{32}", exemplar["labels"]["trace_id"]), exemplar


def test_every_metric_the_dashboards_name_is_in_the_processors_metrics(stack):
    exposition = http_get(stack.metrics_url).decode("utf-8")
    series: set[str] = set()
    for fam in text_string_to_metric_families(exposition):
        if fam.type == "counter":
            series.add(f"{fam.name}_total")
        elif fam.type == "histogram":
            series |= {f"{fam.name}{s}" for s in ("_bucket", "_sum", "_count")}
        else:
            series.add(fam.name)
        series |= {sample.name for sample in fam.samples}
    named: set[str] = set()
    for query in dashboard_queries():
        named |= metric_names(query.expr)
    missing = named - PROMETHEUS_SYNTHETIC - series
    assert not missing, f"named by dashboards but not in /metrics: {sorted(missing)}"
    for name in S.PROMETHEUS_NAMES.values():
        assert name in series or f"{name}_bucket" in series, name
