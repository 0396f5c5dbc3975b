"""Start-up cost of our auto-instrumentation: ``opentelemetry-instrument python -c pass``.

    python benchmarks/startup_bench.py [--rounds 7]

Interleaved rounds of three launches, each a fresh interpreter with no exporter:
``off`` (our three instrumentors disabled), ``ours`` (enabled), and ``official`` (ours off,
the official GenAI OpenAI and Anthropic instrumentors on, which import their libraries at
start-up), when installed. Medians of wall time; goal (issue 11): ours adds at most 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

OURS = "agent_context_openai,agent_context_anthropic,agent_context_langchain"
OFFICIAL = "openai,anthropic"


def _launch(disabled: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none", "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled})
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    start = time.perf_counter()
    subprocess.run([str(launcher), sys.executable, "-c", "pass"], env=env, check=True,
                   capture_output=True, timeout=120)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    cases = {"off": f"{OURS},{OFFICIAL}", "ours": OFFICIAL, "official": OURS}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, disabled in cases.items():
            times[name].append(_launch(disabled))
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds")
    for name, value in med.items():
        print(f"  {name:<9} {value:6.2f} s  (min {min(times[name]):.2f}, "
              f"max {max(times[name]):.2f})")
    print(f"  ours adds {med['ours'] - med['off']:+.2f} s (goal <= 0.2 s); the official "
          f"instrumentors add {med['official'] - med['off']:+.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
