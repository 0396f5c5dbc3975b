"""What the client and framework benchmarks share: the stub in its own process, pinned
cores, timing turn by turn, content capture off everywhere, the summary over rounds."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: the benchmark runs on the first allowed core, the stub on the others: the two never
#: compete for a core, which on a 2-core machine is most of the run-to-run scatter
_CORES = sorted(os.sched_getaffinity(0))


class _Remote:
    """The stub in its own process, so its serving thread does not share our GIL."""

    def __init__(self) -> None:
        pin = _CORES[1:] if len(_CORES) > 1 else None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context.instrumentation._stub"],
            stdout=subprocess.PIPE, text=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.openai_base_url = f"{self.url}/v1"
        self.anthropic_base_url = self.url

    def __enter__(self) -> _Remote:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _time(fn: Callable[[], Any], n: int) -> tuple[list[int], list[int]]:
    """Wall and calling-thread CPU nanoseconds of ``n`` calls."""
    wall, cpu = [], []
    clock, thread_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(n):
        w, c = clock(), thread_clock()
        fn()
        c2, w2 = thread_clock(), clock()
        wall.append(w2 - w)
        cpu.append(c2 - c)
    return wall, cpu


def time_phase(fn: Callable[[], Any], warmup: int, calls: int, exporter: Any,
               into: dict[str, Any], phase: str) -> None:
    """Warm up, then time ``calls`` calls of ``fn`` into ``into[phase]`` (wall and CPU
    nanoseconds), with what the exporter received per call (spans, events, attributes)."""
    _time(fn, warmup)
    exporter.clear()
    wall, cpu = _time(fn, calls)
    into[phase] = {"wall": wall, "cpu": cpu}
    spans = exporter.get_finished_spans()
    events = [e for span in spans for e in span.events]
    into["spans"] = len(spans) / calls
    into["events"] = len(events) / calls
    into["attributes"] = (sum(len(span.attributes or {}) for span in spans)
                          + sum(len(e.attributes or {}) for e in events)) / calls
    exporter.clear()


#: base and instrumented blocks per process, in the order ABBA ...
BLOCKS = 4


def _nothing() -> None:
    return None


def alternate_phases(on: Callable[[], None], off: Callable[[], None],
                     build: Callable[[], dict[str, Callable[[], Any]]], exporter: Any,
                     out: dict[str, Any], calls: int, warmup: int,
                     also: dict[str, tuple[Callable[[], None], Callable[[], None]]]
                     | None = None) -> bool:
    """Time each scenario ``build()`` gives uninstrumented and instrumented (``on()`` /
    ``off()``) in alternating blocks (ABBA), ``calls`` calls a phase in all, into
    ``out[name]`` as ``time_phase`` does: a drift within the process (the heap growing, the
    machine's load changing, connections ageing) falls on both phases alike instead of on
    the one timed second. The scenarios are built again after each switch (an application
    builds its agents after instrumenting). False, with nothing timed, when calls after
    ``off()`` still record spans (the caller then times the phases one after the other).
    ``also``: more instrumented phases (name -> its on and off), timed in the same blocks,
    the phases' order rotating block by block (ABC, BCA, CAB, ...; two phases: ABBA), so a
    ratio of two phases' costs comes from one process."""
    on()
    for fn in build().values():
        fn()
    off()
    exporter.clear()
    for fn in build().values():
        fn()
    clean = not exporter.get_finished_spans()
    exporter.clear()
    if not clean:
        return False
    switches = {"base": (_nothing, _nothing), "instrumented": (on, off), **(also or {})}
    phases = list(switches)
    blocks = BLOCKS if len(phases) == 2 else 2 * len(phases)
    sizes = [calls // blocks + (1 if b < calls % blocks else 0) for b in range(blocks)]
    for name in out:
        out[name].update({phase: {"wall": [], "cpu": []} for phase in phases},
                         alternated=True)
    for phase in phases:  # warm up connections, caches, first calls
        switches[phase][0]()
        for fn in build().values():
            _time(fn, warmup)
        switches[phase][1]()
    # spans, events, attributes of each instrumented phase
    recorded = {name: {phase: [0, 0, 0] for phase in phases[1:]} for name in out}
    for block, per_block in enumerate(sizes):
        if not per_block:
            continue
        for phase in phases[block % len(phases):] + phases[:block % len(phases)]:
            switches[phase][0]()
            for name, fn in build().items():
                _time(fn, 3)
                exporter.clear()
                wall, cpu = _time(fn, per_block)
                out[name][phase]["wall"] += wall
                out[name][phase]["cpu"] += cpu
                spans = exporter.get_finished_spans()
                if phase != "base":
                    events = [e for span in spans for e in span.events]
                    counts = recorded[name][phase]
                    counts[0] += len(spans)
                    counts[1] += len(events)
                    counts[2] += (sum(len(span.attributes or {}) for span in spans)
                                  + sum(len(e.attributes or {}) for e in events))
                elif spans:
                    raise RuntimeError(f"{name}: uninstrumented calls recorded spans")
                exporter.clear()
            switches[phase][1]()
    timed = sum(sizes)
    for name, by_phase in recorded.items():
        for phase, (spans, events, attributes) in by_phase.items():
            # the instrumented phase's as before; another's under its name
            suffix = "" if phase == "instrumented" else f"_{phase}"
            out[name].update({f"spans{suffix}": spans / timed,
                              f"events{suffix}": events / timed,
                              f"attributes{suffix}": attributes / timed})
    return True


def phases_line(rounds: dict[str, list[dict[str, Any]]], sequential: bool) -> str:
    """How the processes ordered their phases, for the report."""
    if sequential:
        return "Phases: uninstrumented first, then instrumented, in every process."
    fallback = sorted({c for per_round in rounds.values() for r in per_round
                       for c, t in r.items() if not t.get("alternated", False)})
    return ("Phases: alternating blocks (ABBA) in every process"
            + (f", except {', '.join(fallback)} (uninstrument() left calls recorded: "
               "sequential)" if fallback else "") + ".")


#: content capture off in every configuration (each peer's own switch)
NO_CONTENT = {
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false",
    "TRACELOOP_TRACE_CONTENT": "false",
    "OPENINFERENCE_HIDE_INPUTS": "true",
    "OPENINFERENCE_HIDE_OUTPUTS": "true",
    "OPENINFERENCE_HIDE_INPUT_MESSAGES": "true",
    "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "true",
}


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _quantiles(values: Sequence[float], scale: float = 1e3) -> tuple[float, float, float]:
    """p25, median, p75 (nanoseconds to microseconds by default)."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else \
        [values[0]] * 3
    return q[0] / scale, q[1] / scale, q[2] / scale


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """scenario -> configuration -> p25, median, p75 (µs) of CPU and wall per call (all
    rounds' calls pooled; ``uninstrumented``: every process's baseline pooled), and the
    added CPU and wall: each round's difference of medians within the process, then their
    median, p25 and p75 over rounds; spans a call."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    med = statistics.median
    for scenario, per_round in rounds.items():
        configs = list(dict.fromkeys(c for r in per_round for c in r))
        base_all: dict[str, list[int]] = {"cpu": [], "wall": []}
        summary[scenario] = {}
        for config in configs:
            runs = [r[config] for r in per_round if config in r]
            entry: dict[str, Any] = {
                f"{what}_per_call": statistics.mean(t[what] for t in runs)
                for what in ("spans", "events", "attributes")}
            others = _other_phases(runs)
            for other in others:
                entry[f"attributes_per_call_{other}"] = statistics.mean(
                    t.get(f"attributes_{other}", 0.0) for t in runs)
            entry["calls"] = sum(len(t["instrumented"]["cpu"]) for t in runs)
            for key in ("cpu", "wall"):
                pooled = [x for t in runs for x in t["instrumented"][key]]
                entry[key] = _quantiles(pooled)
                added = [(med(t["instrumented"][key]) - med(t["base"][key])) / 1e3
                         for t in runs]
                entry[f"{key}_added"] = _quantiles(added, scale=1.0)
                entry[f"{key}_added_per_round"] = added
                for other in others:
                    # another phase of the same processes (``alternate_phases``'s
                    # ``also``): its added cost, and the instrumented one's over it, a
                    # ratio per round from one process
                    theirs = [(med(t[other][key]) - med(t["base"][key])) / 1e3 for t in runs]
                    entry[f"{key}_added_{other}"] = _quantiles(theirs, scale=1.0)
                    # a round where the other phase added nothing measurable (its median
                    # at or under the baseline's, noise on few calls) has no ratio: it is
                    # left out and counted, never an infinite or negative "ratio"
                    ratios = [a / b for a, b in zip(added, theirs, strict=True) if b > 0]
                    entry[f"{key}_ratio_to_{other}"] = (
                        _quantiles(ratios, scale=1.0) if ratios else None)
                    entry[f"{key}_ratio_to_{other}_left_out"] = len(added) - len(ratios)
                base_all[key] += [x for t in runs for x in t["base"][key]]
            summary[scenario][config] = entry
        summary[scenario] = {"uninstrumented": {
            "cpu": _quantiles(base_all["cpu"]), "wall": _quantiles(base_all["wall"]),
            "calls": len(base_all["cpu"])}, **summary[scenario]}
    return summary


def _other_phases(runs: list[dict[str, Any]]) -> list[str]:
    """The phases beyond ``base`` and ``instrumented`` that every run timed."""
    if not runs:
        return []
    common = set.intersection(*({k for k, v in t.items()
                                  if isinstance(v, dict) and "cpu" in v} for t in runs))
    return sorted(common - {"base", "instrumented"})


def _cell(q: tuple[float, float, float]) -> str:
    return f"{q[1]:.0f} ({q[0]:.0f}–{q[2]:.0f})"


def tables(summary: dict[str, dict[str, dict[str, Any]]], configs: list[str],
           unit: str = "call") -> list[str]:
    """The added CPU and wall tables and what each configuration recorded, per ``unit``
    (a call, a turn), as Markdown lines."""
    lines = []
    for title, key, base_key, base_unit in (
            (f"Added caller-thread CPU per {unit}, µs: median (p25–p75 over rounds)",
             "cpu_added", "cpu", f"uninstrumented CPU µs, median (p25–p75 over {unit}s)"),
            (f"Added wall time per {unit}, µs: median (p25–p75 over rounds)", "wall_added",
             "wall", f"uninstrumented wall µs, median (p25–p75 over {unit}s)")):
        lines += [f"### {title}", "",
                  f"| scenario | {base_unit} | " + " | ".join(configs) + " |",
                  "|---|---:|" + "---:|" * len(configs)]
        for scenario, by_config in summary.items():
            base = by_config["uninstrumented"][base_key]
            lines.append(f"| {scenario} | {_cell(base)} | "
                         + " | ".join(_cell(by_config[c][key]) if c in by_config else "–"
                                      for c in configs) + " |")
        lines.append("")
    lines += [f"### Recorded per {unit}: spans / events / attributes (span and event ones)",
              "", "| scenario | " + " | ".join(configs) + " |",
              "|---|" + "---:|" * len(configs)]
    for scenario, by_config in summary.items():
        lines.append(f"| {scenario} | " + " | ".join(
            "{spans_per_call:.0f} / {events_per_call:.0f} / {attributes_per_call:.0f}".format(
                **by_config[c]) if c in by_config else "–" for c in configs) + " |")
    lines.append("")
    return lines


def _machine() -> str:
    model = platform.processor() or "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
            f"load average {os.getloadavg()[0]:.1f}")
