"""Instructions per agent turn (callgrind), the frameworks, scenarios and configurations of
``frameworks_bench.py``: a count that the machine's load does not move. Issue 12.

    python benchmarks/frameworks_ir.py [--turns 10] [--warmup 3] [--frameworks NAME,...]
        [--configs NAME,...]

Each framework and configuration runs in a process of its own under ``valgrind
--tool=callgrind --instr-atstart=no`` (Debian's ``valgrind`` package), the stub in another
process (not counted; nor is the MCP scenario's stdio server, a process of its own: only the
client's side of its session is counted). The process runs every scenario of its framework
uninstrumented, then instrumented (the agents built again after the switch, as
``frameworks_bench.py`` does); in
each phase a scenario is warmed up, then callgrind counts only around its ``--turns`` turns,
with the garbage collector off meanwhile. What a configuration adds is its instrumented count
less the same process's uninstrumented one, per turn; every thread of the process is counted
(the Agents SDK runs its tools and tracing on threads of the same process). Instructions are
not time, but they rank differences that the timing runs on a shared machine cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind  # noqa: E402
import frameworks_bench as bench  # noqa: E402
from _rounds import NO_CONTENT, _machine, _Remote, _version  # noqa: E402

PHASES = ("base", "instrumented")


def _child(framework: str, config: str, url: str, turns: int, warmup: int) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    build, configs, _ = bench.FRAMEWORKS[framework]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bench._prepare(framework)
    instrumentors = configs[config]()
    for p, phase in enumerate(PHASES):
        if phase == "instrumented":
            for inst in instrumentors:
                inst.instrument(tracer_provider=provider)
        fns = build(f"{url}/v1")
        for s, name in enumerate(bench.SCENARIOS[framework]):
            callgrind.measure(fns[name], warmup, turns, f"p{p}s{s}", exporter,
                              f"{config}: {name}" if phase == "instrumented" else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10,
                        help="counted turns per scenario and phase")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--frameworks", help="comma-separated subset of: "
                        + ", ".join(bench.FRAMEWORKS))
    parser.add_argument("--configs", help="comma-separated subset of: "
                        + ", ".join(bench.CONFIG_NAMES))
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--stub-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.framework, args.child, args.stub_url, args.turns, args.warmup)
        return
    if not callgrind.available():
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    frameworks = args.frameworks.split(",") if args.frameworks else list(bench.FRAMEWORKS)
    wanted = args.configs.split(",") if args.configs else list(bench.CONFIG_NAMES)
    unknown = (set(frameworks) - set(bench.FRAMEWORKS)) | (set(wanted) - set(bench.CONFIG_NAMES))
    if unknown:
        raise SystemExit(f"unknown frameworks or configurations: {sorted(unknown)}")
    jobs = [(f, c) for f in frameworks for c in bench.CONFIG_NAMES
            if c in wanted and bench.has(f, c)]
    absent = {(f, c): m for f, c in jobs if (m := bench.missing(f, c))}
    added: dict[str, dict[str, float]] = {}
    base: dict[str, list[float]] = {}
    with _Remote() as stub:
        for framework, config in jobs:
            if (framework, config) in absent:
                continue
            counts = callgrind.run(
                [sys.executable, __file__, "--child", config, "--framework", framework,
                 "--stub-url", stub.url, "--turns", str(args.turns),
                 "--warmup", str(args.warmup)], {**os.environ, **NO_CONTENT}, args.turns)
            for s, name in enumerate(bench.SCENARIOS[framework]):
                base.setdefault(name, []).append(counts[f"p0s{s}"])
                added.setdefault(name, {})[config] = counts[f"p1s{s}"] - counts[f"p0s{s}"]
    print(f"Machine: {_machine()}; valgrind's callgrind; Python {sys.version.split()[0]}.")
    print("Versions: " + ", ".join(f"{d} {v}" for d in bench.VERSIONED
                                   if (v := _version(d))) + ".")
    print(f"{args.turns} counted turns per scenario, phase and configuration "
          f"({args.warmup} warm-up turns), traces, content capture off.")
    for (f, c), dists in absent.items():
        print(f"Not installed, not counted: {f} {c} ({', '.join(dists)}).")
    configs = [c for c in bench.CONFIG_NAMES if any(c in by for by in added.values())]
    print()
    print("### Instructions added per turn (thousands), whole process")
    print()
    print("| scenario | uninstrumented | " + " | ".join(configs) + " |")
    print("|---|---:|" + "---:|" * len(configs))
    for name, by in added.items():
        middle = sorted(base[name])[len(base[name]) // 2]
        print(f"| {name} | {middle / 1e3:,.0f} | " + " | ".join(
            f"+{by[c] / 1e3:,.0f}" if c in by else "–" for c in configs) + " |")
    print()
    print(_goals(added))
    if args.json:
        Path(args.json).write_text(json.dumps({"turns": args.turns, "added": added,
                                               "base": base}, indent=1))


def _goals(added: dict[str, dict[str, float]]) -> str:
    """ours and ours composed against the official configurations (issue 12's 1.5x)."""
    columns = (("ours", "official GenAI"), ("ours + official", "official GenAI"),
               ("ours", "official (framework)"))
    lines = ["### Goal on instructions (issue 12: at most 1.5x the official instrumentor)", "",
             "| scenario | " + " | ".join(f"{a} ÷ {b}" for a, b in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for name, by in added.items():
        lines.append(f"| {name} | " + " | ".join(
            callgrind.ratio(by.get(a), by.get(b), 1.5) for a, b in columns) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
