"""Probe: where the emitter waits for the store (``store.writer: process``), on a timeline.

    python benchmarks/probes/store_waits.py [--rounds 3] [--requests 32] [--case ctx20]

``store_bench.py --concurrent``'s run (requests ingested on this thread while the emitter's
thread rebuilds and writes, both cores), with the pipeline's steps timed from the outside:
for each batch the emitter takes, how many envelopes, how long it rebuilt them, how long it
then waited for the store's previous batch (``finish_pending`` inside ``_emit``), its JSON
Lines write; the store thread's write of each batch (wall time, from the request sent to
the child's answer); and the run's tail: from the emitter's last batch handed to the store
to the last batch recorded written (what the benchmark's clock still counts). Wall-clock
times, so they move with the machine's load; the sum of the waits against the run's time is
what the store costs the emitter beyond its CPU.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans  # noqa: E402

from otel_agent_context.processor import _pipeline as P  # noqa: E402
from otel_agent_context.processor._server import tune_gc  # noqa: E402
from otel_agent_context.processor._sinks import JsonlSink  # noqa: E402
from otel_agent_context.processor._store_process import StoreProcess  # noqa: E402

EVENTS: list[tuple[str, float, float, int]] = []  # (what, start, end, envelopes)
_IN_EMIT = threading.local()


def _schedstat(pid: int | None) -> tuple[int, int] | None:
    """The child's time on a CPU and waiting in the run queue, ns (/proc/PID/schedstat)."""
    if pid is None:
        return None
    try:
        on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    except OSError:
        return None
    return int(on_cpu), int(waiting)


def _clocked(what: str, function: Any, size: Any = None) -> Any:
    def clocked(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            n = size(*args) if size is not None else 0
            label = what
            if what == "finish_pending":
                label = "wait_in_emit" if getattr(_IN_EMIT, "on", False) else "wait_idle"
            EVENTS.append((label, start, time.perf_counter(), n))
    return clocked


def _instrument() -> None:
    emit = P.Pipeline._emit

    def _emit(self: Any, batch: list[Any]) -> Any:
        _IN_EMIT.on = True
        start = time.perf_counter()
        try:
            return emit(self, batch)
        finally:
            _IN_EMIT.on = False
            EVENTS.append(("emit", start, time.perf_counter(), len(batch)))

    P.Pipeline._emit = _emit  # type: ignore[method-assign]
    P.Pipeline.finish_pending = _clocked(  # type: ignore[method-assign]
        "finish_pending", P.Pipeline.finish_pending)
    JsonlSink.write = _clocked("jsonl", JsonlSink.write,  # type: ignore[method-assign]
                               lambda self, entries, *a: len(entries))
    StoreProcess.write = _clocked("store", StoreProcess.write,  # type: ignore[method-assign]
                                  lambda self, entries, *a: len(entries))
    if hasattr(StoreProcess, "write_part"):  # a batch sent in parts: the last one answers
        write_part = StoreProcess.write_part

        def part(self: Any, entries: Any, members: Any, batch: int, number: int,
                 last: bool) -> Any:
            start = time.perf_counter()
            try:
                return write_part(self, entries, members, batch, number, last)
            finally:
                EVENTS.append(("store" if last else "part", start, time.perf_counter(),
                               len(entries)))

        StoreProcess.write_part = part  # type: ignore[method-assign]


def run(directory: Path, bodies: list[bytes], store: str) -> dict[str, float]:
    pipeline = _pipeline(directory, **{"store.url": store, "store.writer": "process"})
    gc.collect()
    EVENTS.clear()
    child = pipeline.store.pid if isinstance(pipeline.store, StoreProcess) else None
    sched = _schedstat(child)
    start = time.perf_counter()
    thread = threading.Thread(target=pipeline._emit_loop, daemon=True)
    pipeline._threads.append(thread)
    thread.start()
    for body in bodies:
        pipeline.ingest(body, "bench")
    ingested = time.perf_counter()
    # what is left when the last request is in: envelopes queued for the emitter (not yet
    # rebuilt), and in batches on their way to the sinks (rebuilt, not recorded written)
    queued = len(pipeline._queue) + pipeline._in_batch
    flying = pipeline.queue_size - queued
    while pipeline.queue_size:
        time.sleep(0.0005)
    end = time.perf_counter()
    sched_end = _schedstat(child)
    pipeline.close(timeout=5)
    events = [e for e in EVENTS if e[2] <= end]
    emits = [e for e in events if e[0] == "emit"]
    last_emit_end = max(e[2] for e in emits)

    def total(what: str) -> float:
        return sum(e[2] - e[1] for e in events if e[0] == what) * 1e3

    stores = [e for e in events if e[0] == "store"]
    return {
        "run_ms": (end - start) * 1e3,
        "ingest_ms": (ingested - start) * 1e3,
        "queued_at_ingest_end": queued,
        "flying_at_ingest_end": flying,
        "batches": len(emits),
        "batch_median": statistics.median(e[3] for e in emits),
        "emit_ms": total("emit"),
        "wait_in_emit_ms": total("wait_in_emit"),
        "wait_idle_ms": total("wait_idle"),
        "jsonl_ms": total("jsonl"),
        "store_write_ms_median": (statistics.median((e[2] - e[1]) * 1e3 for e in stores)
                                  if stores else 0.0),
        "store_ms": total("store"),
        "tail_ms": (end - last_emit_end) * 1e3,
        # over the run: the store's child on a CPU, and waiting for one (run queue)
        "child_cpu_ms": (sched_end[0] - sched[0]) / 1e6 if sched and sched_end else 0.0,
        "child_runq_ms": (sched_end[1] - sched[1]) / 1e6 if sched and sched_end else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--case", choices=("ctx20", "sel100"), default="ctx20")
    args = parser.parse_args(argv)
    make, per_request = {"ctx20": (ctx20_spans, 512), "sel100": (sel100_spans, 64)}[args.case]
    tune_gc()
    _instrument()
    keys = ("run_ms", "ingest_ms", "queued_at_ingest_end", "flying_at_ingest_end",
            "batches", "batch_median", "emit_ms", "wait_in_emit_ms", "wait_idle_ms",
            "jsonl_ms", "store_write_ms_median", "store_ms", "child_cpu_ms", "child_runq_ms",
            "tail_ms")
    print("| round | sink | " + " | ".join(keys) + " |")
    print("|---|---|" + "---:|" * len(keys))
    with tempfile.TemporaryDirectory(prefix="store-waits-") as tmp:
        for r in range(args.rounds):
            bodies = [_request(r * args.requests + i + 1, make, per_request)
                      for i in range(args.requests)]
            for store in (("off", "sqlite") if r % 2 == 0 else ("sqlite", "off")):
                row = run(Path(tmp) / f"{r}-{store}", bodies, store)
                print(f"| {r} | {store} | " + " | ".join(f"{row[k]:,.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
