"""The documented framework benchmark runs and reports every framework and configuration.

Only that it works: the numbers themselves are recorded in benchmarks/frameworks.md, never
asserted here beyond being there and of the right sign (a timed assertion on a shared
machine measures the machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llm_helpers import assert_added_tables
from llm_helpers import markdown_table as _table

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "frameworks_bench.py"

SCENARIOS = ("langchain create_agent + tool", "langchain retrieval chain",
             "openai-agents Runner.run_sync + tool", "mcp resource + prompt + tool, chat call")
#: what CI has (the test extra): ours, against each process's uninstrumented baseline; the
#: official framework instrumentors and the peers come with the bench extra only (and each
#: child process imports its framework: a few seconds each on a loaded machine)
ASKED = ("ours",)


def test_benchmark_reports_every_framework_and_configuration(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--calls", "2",
                           "--warmup", "1", "--configs", ",".join(ASKED), "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "load average" in lines[0]
    assert lines[1].startswith("Versions: ") and "langchain " in lines[1]
    assert "openai-agents " in lines[1] and "mcp " in lines[1]
    assert not [line for line in lines if line.startswith("Not installed")]
    timed = list(ASKED)
    assert_added_tables(lines, SCENARIOS, timed)
    _, recorded = _table(lines, "Recorded per turn")
    assert list(recorded) == list(SCENARIOS)
    ours = timed.index("ours")
    for scenario, cells in recorded.items():
        spans, _events, attributes = (int(n) for n in cells[ours].split(" / "))
        # ours recorded the turn: its envelope and its model calls (two with the tool); MCP:
        # an implicit envelope and a surface for each of the three session calls, the call
        assert spans >= (7 if scenario.startswith("mcp") else 3 if "tool" in scenario
                         else 2), (scenario, cells[ours])
        assert attributes > spans
    _, goals = _table(lines, "Goal")
    assert list(goals) == list(SCENARIOS)
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == set(SCENARIOS)
    for scenario in SCENARIOS:
        entry = summary[scenario]["ours"]
        assert entry["calls"] == 2
        assert entry["cpu"][1] > 0 and entry["wall"][1] > 0
        assert summary[scenario]["uninstrumented"]["calls"] == 2 * len(timed)
