"""Probe: the store's cost in CPU time rather than wall time, which a machine shared with
other work distorts far less (a loaded machine makes store_bench.py's wall-clock rounds spread
from 0.5x to 1.0x).

    python benchmarks/probes/store_cpu.py [--rounds 3] [--requests 8]

The pipeline of ``store_bench.py`` (``processor_bench``'s ctx20 and sel100 requests, fsync on),
without and with the SQLite store, alternating; for each: the process's CPU time per envelope,
and with the store, the CPU time of the store's thread (``Store.write``), of which turning
bundles into rows (``bundle_rows``) and SQLite's own statements and commits (CPU, and wall time
including the fsyncs); and with ``store.writer: process``, the processor's CPU time per
envelope and the store child's. Medians of the rounds.

``--callgrind [--requests 8]``: instead, the instructions of the processor's own process (all
its threads, not the store's child) per envelope, JSON Lines alone and with the store's
process, one pass after a warm one (load-independent).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _callgrind  # noqa: E402
from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans  # noqa: E402
from store_bench import timed_run  # noqa: E402

import otel_agent_context._store._store as S  # noqa: E402
from otel_agent_context.processor._server import tune_gc  # noqa: E402
from otel_agent_context.processor._store_process import StoreProcess  # noqa: E402

SPENT = {"store": 0.0, "rows": 0.0, "sql_cpu": 0.0, "sql_wall": 0.0}


def _timed(function: Any, key: str) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[key] += time.thread_time() - started
    return timed


def _timed_sql(function: Any) -> Any:
    def timed(*args: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args)
        finally:
            SPENT["sql_wall"] += time.perf_counter() - wall
            SPENT["sql_cpu"] += time.thread_time() - cpu
    return timed


def _child_cpu(pid: int | None) -> float:
    """CPU seconds (user and system) the store's child process has used so far."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_run(directory: Path, bodies: list[bytes]) -> tuple[float, float, int]:
    """``timed_run`` with ``store.writer: process``: this process's CPU seconds, the store
    child's, and how many envelopes."""
    pipeline = _pipeline(directory, **{"store.url": "sqlite", "store.writer": "process"})
    store = pipeline.store
    assert isinstance(store, StoreProcess)
    pid = store.pid
    gc.collect()
    child, start = _child_cpu(pid), time.process_time()
    for body in bodies:
        pipeline.ingest(body, "bench")
    envelopes = pipeline.emit_pending()
    spent, child = time.process_time() - start, _child_cpu(pid) - child
    pipeline.close(timeout=5)
    return spent, child, envelopes


def main(argv: list[str] | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="store-cpu-") as tmp:  # ~300 MB a run
        if argv is None:
            argv = sys.argv[1:]
        if "--callgrind" in argv:
            return _callgrind_main(argv, Path(tmp))
        return _main(argv, Path(tmp))


def _callgrind_main(argv: list[str], tmp: Path) -> int:
    """``--callgrind``: the instructions of the processor's process (every thread of it, not
    the store's child) per envelope, for ingest and emission of ``--requests`` requests with
    the JSON Lines sink alone and with ``store.writer: process``; load-independent."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = {"ctx20": (ctx20_spans, 512), "sel100": (sel100_spans, 64)}
    if args.child:
        name, store = args.child.split(":")
        make, per_request = cases[name]
        bodies = [_request(i + 1, make, per_request) for i in range(args.requests)]
        for warm in (True, False):
            pipeline = _pipeline(tmp / f"{name}-{store}-{warm}",
                                 **{"store.url": store, "store.writer": "process"})

            def run(pipeline: Any = pipeline) -> None:
                for body in bodies:
                    pipeline.ingest(body, "bench")
                pipeline.emit_pending()

            if warm:
                run()
            else:
                _callgrind.count(run, 1, f"{name}-{store}")
            pipeline.close(timeout=5)
        return 0
    tune_gc()
    for name, (_, per_request) in cases.items():
        envelopes = args.requests * per_request // 8
        counts = {}
        for store in ("off", "sqlite"):
            counts.update(_callgrind.run(
                [sys.executable, __file__, "--callgrind", "--requests", str(args.requests),
                 "--child", f"{name}:{store}"], dict(os.environ), envelopes))
        alone, with_store = counts[f"{name}-off"], counts[f"{name}-sqlite"]
        print(f"{name}: the processor's instructions an envelope: JSON Lines alone "
              f"{alone / 1e3:,.0f}K, with store.writer: process {with_store / 1e3:,.0f}K "
              f"({alone / with_store:.3f}x)", flush=True)
    return 0


def _main(argv: list[str] | None, tmp: Path) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args(argv)
    S.Store.write = _timed(S.Store.write, "store")  # type: ignore[method-assign]
    S.bundle_rows = _timed(S.bundle_rows, "rows")
    S._SqliteConnection.executemany = _timed_sql(  # type: ignore[method-assign]
        S._SqliteConnection.executemany)
    S._SqliteConnection.commit = _timed_sql(S._SqliteConnection.commit)  # type: ignore[method-assign]
    tune_gc()
    print("| case | CPU µs/envelope, JSON Lines alone | with the store (thread) | "
          "ratio (alone/with) | store thread | of which bundle_rows | SQLite CPU | "
          "SQLite wall (with fsync) | store.writer process: processor's CPU | ratio "
          "(alone/with) | store process's CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, make, per_request in (("ctx20", ctx20_spans, 512), ("sel100", sel100_spans, 64)):
        cpu: dict[str, list[float]] = {"off": [], "sqlite": [], "process": [], "child": []}
        parts: list[dict[str, float]] = []
        for r in range(args.rounds):
            bodies = [_request(r * args.requests + i + 1, make, per_request)
                      for i in range(args.requests)]
            order = ("off", "sqlite", "process")
            for store in order[r % 3:] + order[:r % 3]:
                if store == "process":
                    spent, child, envelopes = process_run(tmp / f"{name}-{r}-p", bodies)
                    cpu["process"].append(spent / envelopes * 1e6)
                    cpu["child"].append(child / envelopes * 1e6)
                    continue
                for key in SPENT:
                    SPENT[key] = 0.0
                spent, envelopes = timed_run(tmp / f"{name}-{r}-{store}", store, bodies,
                                             time.process_time, writer="thread")
                cpu[store].append(spent / envelopes * 1e6)
                if store == "sqlite":
                    parts.append({k: v / envelopes * 1e6 for k, v in SPENT.items()})
        alone, with_store = statistics.median(cpu["off"]), statistics.median(cpu["sqlite"])
        part = {k: statistics.median(p[k] for p in parts) for k in SPENT}
        print(f"| {name} | {alone:,.0f} | {with_store:,.0f} | {alone / with_store:.3f}x | "
              f"{part['store']:,.0f} | {part['rows']:,.0f} | {part['sql_cpu']:,.0f} | "
              f"{part['sql_wall']:,.0f} | {statistics.median(cpu['process']):,.0f} | "
              f"{alone / statistics.median(cpu['process']):.3f}x | "
              f"{statistics.median(cpu['child']):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
