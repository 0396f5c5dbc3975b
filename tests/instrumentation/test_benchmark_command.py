"""The documented instrumentation benchmark runs and reports every scenario and mode.

Only that it works: the numbers themselves are recorded in benchmarks/instrumentation.md,
never asserted here (a timed assertion on a shared machine measures the machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "instrumentation_bench.py"

SCENARIOS = ("openai chat.completions", "openai chat.completions stream",
             "openai chat.completions async", "openai responses", "anthropic messages",
             "anthropic messages.stream")
MODES = ("otel-agent-context", "official GenAI", "both", "bare span")


def test_benchmark_reports_every_scenario_and_mode() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--calls", "4", "--rounds", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| scenario"))
    for mode in MODES:
        assert f"{mode}: added µs (%)" in header
    rows = {line.split("|")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("| openai") or line.startswith("| anthropic")}
    assert set(rows) == set(SCENARIOS)
    for line in rows.values():
        # uninstrumented ms, one "µs (%)" cell per mode, then the CPU column
        assert len(re.findall(r"-?\d+ \(-?\d+\.\d%\)", line)) == len(MODES)
        assert float(line.split("|")[2]) > 0


def test_folded_stages_probe_reports_its_three_scenarios() -> None:
    probe = BENCH.parent / "probes" / "folded_stages.py"
    proc = subprocess.run([sys.executable, str(probe), "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines()
            if line.startswith("| openai") or line.startswith("| anthropic")]
    assert [r.split("|")[1].strip() for r in rows] == [
        "openai chat.completions", "openai responses", "anthropic messages"]
    assert all(len(re.findall(r"-?\d+ \(-?\d+\.\d%\)", r)) == 4 for r in rows)
