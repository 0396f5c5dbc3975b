"""Whose code a call's CPU goes to, ours or the official instrumentor's, within one process.

    python benchmarks/attribution_bench.py [--rounds 2] [--calls 6000] [--rate 997]
        [--configs NAME,...] [--scenarios NAME,...] [--json FILE]

The timing benchmark (``instrumentation_bench.py``) subtracts an uninstrumented median from
an instrumented one; its composed ÷ official ratio moves by ±0.1 from run to run, more than
most changes it is asked to judge. This one divides a call's samples between their owners
instead, in the same process and the same calls: ``py-spy`` (the ``bench`` extra; a
sampling profiler outside the process, which runs unchanged between samples) records the
Python stacks of a configuration's process calling the real client on the loopback stub
(``instrumentation_bench.scenarios``), and each sample goes to the innermost frame that
names an owner:

- ``ours``: a frame of the imported ``otel_agent_context`` package;
- ``official``: a frame of an ``opentelemetry.instrumentation`` package (the official GenAI
  instrumentors); util-genai, the SDK, the API and wrapt are the code both call, and go to
  the caller;
- ``client``: a frame of the ``openai`` or ``anthropic`` package or of their HTTP stack
  (``httpx``, ``httpcore``, ``h11``, ``anyio``): the request, the exchange, the response's
  parsing, a stream's reads (under an instrumentor's stream wrapper too), the client's
  decorators;
- ``scenario``: the benchmark's own code around the call (an async call's event loop).

An instrumentor's share is its samples ÷ the client's: the client's work is the same in
every configuration, so the shares of two processes compare without their clocks (the
goal's composed ÷ official is the composed process's ours + official share ÷ the official
process's official share). With the official instrumentor outermost (``official + ours``)
it does its whole work in the composed process, and 1 + ours ÷ official there is the same
ratio from one process (the shares of two processes differ by up to ~10%). The garbage
collector's time is not a frame: it falls on the code that allocated when a collection
started, mostly the client's; each process times its collections itself (``gc.callbacks``,
the thread's CPU clock), reported a call beside the shares. py-spy pauses the process for
each sample (its default, for consistent stacks): shares, not times, are what it gives.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import otel_agent_context

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: owners by a frame's file, the first match from the innermost frame deciding (a frame of
#: none of them, such as the SDK's, util-genai's or the standard library's: its caller's)
_OURS = str(Path(otel_agent_context.__file__).resolve().parent) + os.sep
_OFFICIAL = f"{os.sep}opentelemetry{os.sep}instrumentation{os.sep}"
#: the clients and their HTTP stack: a stream's reads, under an instrumentor's stream
#: wrapper, are the client's too
_CLIENT = tuple(f"{os.sep}site-packages{os.sep}{name}{os.sep}"
                for name in ("openai", "anthropic", "httpx", "httpcore", "h11", "anyio"))
_SCENARIO = str(Path(__file__).resolve().parent / "instrumentation_bench.py")
OWNERS = ("ours", "official", "client", "scenario")

#: the composed configuration whose official instrumentor does its whole work (outermost)
IN_PROCESS = "official + ours"
DEFAULT_CONFIGS = ("official GenAI", "ours", "ours + official", "official + ours")
DEFAULT_SCENARIOS = ("openai chat.completions", "openai chat.completions new turn",
                     "anthropic messages", "anthropic messages new turn")


def owner(frames: Sequence[str]) -> str | None:
    """The owner of a sample (its frames outermost first, py-spy's raw form), or None for a
    sample outside the timed calls."""
    for frame in reversed(frames):
        if _OURS in frame:
            return "ours"
        if _OFFICIAL in frame:
            return "official"
        if any(part in frame for part in _CLIENT):
            return "client"
        if _SCENARIO in frame:
            return "scenario"
    return None


def count(lines: Iterable[str]) -> dict[str, int]:
    """Samples by owner from py-spy's raw output (``frame;frame;... count`` a line)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        found = owner(stack.split(";"))
        if found is not None:
            counts[found] += int(n)
    return {name: counts[name] for name in OWNERS}


def shares(counts: dict[str, int]) -> dict[str, float | None]:
    """Each instrumentor's samples ÷ the client's (None without client samples)."""
    client = counts["client"]
    if client <= 0:
        return {"ours": None, "official": None, "instrumentation": None}
    return {"ours": counts["ours"] / client, "official": counts["official"] / client,
            "instrumentation": (counts["ours"] + counts["official"]) / client}


def composed_ratio(composed: dict[str, float | None],
                   official: dict[str, float | None]) -> float | None:
    """The goal's composed ÷ official from two processes' shares."""
    num, den = composed["instrumentation"], official["official"]
    return None if num is None or not den else num / den


def child(config: str, scenario: str, calls: int, warmup: int) -> None:
    """One configuration's process: instrument, warm up, call, print the collector's time."""
    import gc

    import instrumentation_bench as bench
    from _rounds import _Remote
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spent = [0, 0, 0]  # ns in collections, collections, the last start

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[2] = time.thread_time_ns()
        else:
            spent[0] += time.thread_time_ns() - spent[2]
            spent[1] += 1

    with _Remote() as stub:
        for inst in bench.CONFIGS[config]():
            inst.instrument(tracer_provider=provider)
        fn = bench.scenarios(stub)[scenario]
        for _ in range(warmup):
            fn()
        exporter.clear()
        gc.collect()
        print("ready", flush=True)
        sys.stdin.readline()  # the profiler attached
        gc.callbacks.append(timed)
        cpu = time.thread_time_ns()
        for i in range(calls):
            fn()
            if i % 300 == 299:  # as the timing benchmark: spans kept for a while
                exporter.clear()
        cpu = time.thread_time_ns() - cpu
        gc.callbacks.remove(timed)
    print(json.dumps({"gc_ns": spent[0] / calls, "collections": spent[1] / calls,
                      "cpu_ns": cpu / calls}))


def run(config: str, scenario: str, args: argparse.Namespace, spy: str) -> dict[str, Any]:
    """One configuration's process, sampled from its first timed call to its end (attached
    after the warm-up: py-spy launching the process slowed it ~50x here)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw.txt")
        # a session of its own: its stub process ends with it if it must be killed
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", config, scenario, str(args.calls),
             str(args.warmup)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True)
        assert proc.stdout is not None
        err = ""
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{config} / {scenario}: the process did not start")
            spied = subprocess.Popen(
                [spy, "record", "--full-filenames", "--format", "raw", "--rate",
                 str(args.rate), "--output", raw, "--pid", str(proc.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)  # attached
            out, _ = proc.communicate("go\n", timeout=_TIMEOUT)
            _, err = spied.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.returncode != 0 or not os.path.exists(raw):
            raise RuntimeError(f"{config} / {scenario}: no samples:\n{err[-2000:]}")
        with open(raw, encoding="utf-8") as f:
            counts = count(f)
    return {"counts": counts, **json.loads(out.strip().splitlines()[-1])}


#: seconds a configuration's process may take after its warm-up
_TIMEOUT = 1800


def _median(values: Iterable[float | None]) -> float | None:
    known = sorted(v for v in values if v is not None)
    if not known:
        return None
    mid = len(known) // 2
    return known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2


def report(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """A table a scenario: each configuration's shares and the collector's time (medians of
    the rounds), and the composed ÷ official ratio from the shares."""
    out = []
    for scenario, by_config in results.items():
        out += [f"#### {scenario}", "",
                "| configuration | ours ÷ client | official ÷ client | composed ÷ official"
                " | the same, one process | collector µs a call"
                " | samples (ours / official / client) |",
                "|---|---:|---:|---:|---:|---:|---|"]
        official_runs = by_config.get("official GenAI", [])
        for config, runs in by_config.items():
            per = [shares(r["counts"]) for r in runs]
            ratio = _median([composed_ratio(s, shares(o["counts"]))
                             for s, o in zip(per, official_runs, strict=False)]) \
                if "+" in config else None
            ours = _median([s["ours"] for s in per])
            official = _median([s["official"] for s in per])
            gc_us = _median([r["gc_ns"] / 1000 for r in runs])
            samples = ", ".join(f"{r['counts']['ours']} / {r['counts']['official']} / "
                                f"{r['counts']['client']}" for r in runs)
            # the official instrumentor outermost does all its work in the composed process:
            # its own share there is the denominator, without another process's noise
            alone = _median([1 + s["ours"] / s["official"] for s in per
                             if s["ours"] is not None and s["official"]]) \
                if config == IN_PROCESS else None
            out.append(f"| {config} | {_fmt(ours)} | {_fmt(official)} | {_fmt(ratio)} | "
                       f"{_fmt(alone)} | {_fmt(gc_us, 1)} | {samples} |")
        out.append("")
    return "\n".join(out)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--rate", type=int, default=997, help="samples a second")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        parser.error("py-spy not found: pip install -e '.[bench]'")
    configs = args.configs.split(",")
    if "official GenAI" not in configs:
        configs.insert(0, "official GenAI")  # the ratio's denominator
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for scenario in args.scenarios.split(","):
        results[scenario] = {c: [] for c in configs}
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for config in order:
                results[scenario][config].append(run(config, scenario, args, spy))
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {args.rounds} rounds × {args.calls} calls, "
          f"py-spy at {args.rate} Hz\n")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
