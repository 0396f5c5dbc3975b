"""Instructions per instrumented LLM client call (callgrind), the configurations and
scenarios of ``instrumentation_bench.py``: a count that the machine's load does not move.
Issue 11.

    python benchmarks/instrumentation_ir.py [--calls 20] [--warmup 12] [--configs NAME,...]
        [--scenarios NAME,...] [--seeds N] [--jobs J]

Each configuration runs in a process of its own under ``valgrind --tool=callgrind
--instr-atstart=no`` (Debian's ``valgrind`` package), the stub in another process (not
counted). The process calls every scenario uninstrumented, then instrumented (the same
clients, the same connections); in each phase a scenario is warmed up, then callgrind counts
only around its ``--calls`` calls (``callgrind_control -i on`` / ``off``, then a dump),
with the garbage collector off while it counts (a collection lands in one phase or another
by chance). What a configuration adds is its instrumented count less the same process's
uninstrumented one, per call. Instructions are not time (cache misses, allocation and the
cost of each instruction are not weighed), but they rank differences of a few percent that
the timing runs on a shared machine (``instrumentation_bench.py``) cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind  # noqa: E402
import instrumentation_bench as bench  # noqa: E402
from _rounds import NO_CONTENT, _machine, _Remote, _version  # noqa: E402

PHASES = ("base", "instrumented")


def _child(config: str, url: str, calls: int, warmup: int, names: list[str]) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentors = bench.CONFIGS[config]()
    stub = SimpleNamespace(openai_base_url=f"{url}/v1", anthropic_base_url=url)
    every = bench.scenarios(stub)
    fns = [every[name] for name in names]  # in the order of ``names``: the dumps' numbers
    for p, phase in enumerate(PHASES):
        if phase == "instrumented":
            for inst in instrumentors:
                inst.instrument(tracer_provider=provider)
        for s, fn in enumerate(fns):
            callgrind.measure(fn, warmup, calls, f"p{p}s{s}", exporter,
                              f"{config}: {names[s]}" if phase == "instrumented" else None)


def _count(config: str, url: str, args: argparse.Namespace, names: list[str], seed: int
           ) -> dict[tuple[int, int], float]:
    """Instructions per call by (phase, scenario) of one configuration's process, its string
    hashes seeded with ``seed`` (dict and set layouts, so the count, follow the seed)."""
    counts = callgrind.run([sys.executable, __file__, "--child", config, "--stub-url", url,
                            "--calls", str(args.calls), "--warmup", str(args.warmup),
                            "--scenarios", ",".join(names)],
                           {**os.environ, **NO_CONTENT, "PYTHONHASHSEED": str(seed)},
                           args.calls)
    return {(p, s): counts[f"p{p}s{s}"] for p in range(len(PHASES)) for s in range(len(names))}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20,
                        help="counted calls per scenario and phase")
    # CPython 3.11 specialises a code object after 8 calls: fewer warm-up calls count the
    # first phase's code cold (runs A-M of instrumentation.md used 3)
    parser.add_argument("--warmup", type=int, default=12)
    parser.add_argument("--configs", help="comma-separated subset of: "
                        + ", ".join(c for c in bench.CONFIGS if c != "uninstrumented"))
    parser.add_argument("--scenarios", help="comma-separated subset of the scenarios")
    # the count of one process moves by ~20K a call with its hash seed (dict and set
    # layouts): each configuration runs once per seed, the medians are reported
    parser.add_argument("--seeds", type=int, default=1,
                        help="processes per configuration, PYTHONHASHSEED 0..N-1; medians")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes counted at once (counts do not move with the load)")
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--stub-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    known = list(bench.scenarios(SimpleNamespace(openai_base_url="http://127.0.0.1:9/v1",
                                                 anthropic_base_url="http://127.0.0.1:9")))
    names = args.scenarios.split(",") if args.scenarios else known
    if set(names) - set(known):
        raise SystemExit(f"unknown scenarios {sorted(set(names) - set(known))}; "
                         f"known: {known}")
    if args.child:
        _child(args.child, args.stub_url, args.calls, args.warmup, names)
        return
    if not callgrind.available():
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    wanted = args.configs.split(",") if args.configs else \
        [c for c in bench.CONFIGS if c != "uninstrumented"]
    absent = {c: m for c in wanted if (m := bench.missing(c))}
    configs = [c for c in wanted if c not in absent]
    added: dict[str, dict[str, float]] = {name: {} for name in names}
    spread: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    base: dict[str, list[float]] = {name: [] for name in names}
    runs = [(config, seed) for seed in range(max(args.seeds, 1)) for config in configs]
    with _Remote() as stub, ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        results = pool.map(lambda run: _count(run[0], stub.url, args, names, run[1]), runs)
        for (config, _seed), counts in zip(runs, results, strict=True):
            for s, name in enumerate(names):
                base[name].append(counts[(0, s)])
                spread[name].setdefault(config, []).append(counts[(1, s)] - counts[(0, s)])
    for name in names:
        for config, values in spread[name].items():
            added[name][config] = _median(values)
    print(f"Machine: {_machine()}; valgrind's callgrind; Python {sys.version.split()[0]}.")
    print("Versions: " + ", ".join(f"{d} {v}" for d in bench.VERSIONED
                                   if (v := _version(d))) + ".")
    print(f"{args.calls} counted calls per scenario, phase and configuration "
          f"({args.warmup} warm-up calls), traces, content capture off; "
          f"{max(args.seeds, 1)} process(es) a configuration (PYTHONHASHSEED 0.."
          f"{max(args.seeds, 1) - 1}), medians.")
    for config, dists in absent.items():
        print(f"Not installed, not counted: {config} ({', '.join(dists)}).")
    print()
    print("### Instructions added per call (thousands), calling process")
    print()
    print("| scenario | uninstrumented | " + " | ".join(configs) + " |")
    print("|---|---:|" + "---:|" * len(configs))
    for name in names:
        uninstrumented = sorted(base[name])[len(base[name]) // 2]
        print(f"| {name} | {uninstrumented / 1e3:,.0f} | "
              + " | ".join(f"+{added[name][c] / 1e3:,.0f}" for c in configs) + " |")
    if args.seeds > 1:
        print()
        print("Added per call by seed (thousands), lowest to highest:")
        print()
        for name in names:
            print(f"- {name}: " + "; ".join(
                f"{c} " + " / ".join(f"{v / 1e3:,.0f}" for v in sorted(spread[name][c]))
                for c in configs))
    print()
    print(_goals(added))
    if args.json:
        Path(args.json).write_text(json.dumps({"calls": args.calls, "added": added,
                                               "by_seed": spread, "base": base,
                                               "missing": absent}, indent=1))


def _goals(added: dict[str, dict[str, float]]) -> str:
    lines = ["### Goals on instructions (issue 11)", "",
             "| scenario | ours ÷ best of OpenInference and OpenLLMetry (≤ 1) "
             "| ours ÷ official (≤ 1.5) | ours + official ÷ official (≤ 1.5) "
             "| official + ours ÷ official (≤ 1.5) |",
             "|---|---:|---:|---:|---:|"]

    def ratio(a: Any, b: Any, goal: float) -> str:
        if a is None or b is None or b <= 0:
            return "–"
        return f"{a / b:.2f} {'met' if a / b <= goal else 'MISSED'}"

    for name, by in added.items():
        peers = [by[c] for c in ("OpenInference", "OpenLLMetry") if c in by]
        lines.append(f"| {name} | {ratio(by.get('ours'), min(peers) if peers else None, 1.0)}"
                     f" | {ratio(by.get('ours'), by.get('official GenAI'), 1.5)}"
                     f" | {ratio(by.get('ours + official'), by.get('official GenAI'), 1.5)}"
                     f" | {ratio(by.get('official + ours'), by.get('official GenAI'), 1.5)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
