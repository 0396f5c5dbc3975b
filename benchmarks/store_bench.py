"""The bundle store's cost and the session page's speed (issue 14's goals).

    python benchmarks/store_bench.py [--rounds 7] [--turns 200] [--quick]

1. Throughput of the processor's pipeline (what ``serve`` runs behind its receivers: decode,
   WAL with fsync, buffer, rebuild, metrics, sinks) with the JSON Lines sink alone and with
   the SQLite store beside it (the default), on the ``ctx20`` and ``sel100`` requests of
   ``processor_bench.py``, alternating in every round, one core. Goal: at most 10% lower.
2. The session page of one conversation of ``--turns`` turns (the demo agent's, rebuilt by
   the processor and stored in SQLite): the time from the request to the full HTML, over
   real HTTP on loopback, and the rendering alone. Goal: under 300 ms for 200 turns.

Prints medians (and the spread) with the machine and versions.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans  # noqa: E402

from otel_agent_context._store import open_store  # noqa: E402
from otel_agent_context.processor._config import Endpoint  # noqa: E402
from otel_agent_context.processor._server import tune_gc  # noqa: E402
from otel_agent_context.processor._ui import UiServer, render_session  # noqa: E402


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:,.0f}–{q[2]:,.0f}"


def timed_run(directory: Path, store: str, bodies: list[bytes],
              clock: Callable[[], float] = time.perf_counter,
              writer: str = "process") -> tuple[float, int]:
    """One pass of the pipeline over ``bodies`` with ``store.url`` = ``store`` (written by
    ``store.writer`` = ``writer``): the time ``clock`` measured from the first request to the
    last envelope written, and how many."""
    pipeline = _pipeline(directory, **{"store.url": store, "store.writer": writer})
    gc.collect()
    start = clock()
    if CONCURRENT:  # as in serve: the emitter's thread writes while requests come in
        pipeline._threads.append(threading.Thread(target=pipeline._emit_loop, daemon=True))
        pipeline._threads[-1].start()
        for body in bodies:
            pipeline.ingest(body, "bench")
        while pipeline.queue_size:
            time.sleep(0.0005)
        elapsed = clock() - start
        envelopes = sum(path.read_bytes().count(b"\n")
                        for path in directory.glob("bundles-*.jsonl"))
        pipeline.close(timeout=5)
        return elapsed, envelopes
    for body in bodies:
        pipeline.ingest(body, "bench")
    envelopes = pipeline.emit_pending()
    elapsed = clock() - start
    pipeline.close(timeout=5)
    return elapsed, envelopes


#: --concurrent: ingest while the emitter's thread writes (as serve does), rather than
#: ingesting every request first and emitting after
CONCURRENT = False

#: what a round runs: the JSON Lines sink alone, and the SQLite store written by each writer
WRITERS = ("process", "thread")


def throughput(rounds: int, requests: int, tmp: Path,
               writers: tuple[str, ...] = WRITERS) -> list[dict[str, Any]]:
    rows = []
    cases = (("ctx20", ctx20_spans, 512), ("sel100", sel100_spans, 64))
    for name, make, per_request in cases:
        spans = requests * per_request
        rates: dict[str, list[float]] = {"jsonl": [], **{w: [] for w in writers}}
        ratios: dict[str, list[float]] = {w: [] for w in writers}
        envelopes = 0
        for r in range(rounds):
            bodies = [_request(r * requests + i + 1, make, per_request)
                      for i in range(requests)]
            order = ("jsonl", *writers)
            shift = r % len(order)  # each variant runs first, second, ... in turn
            this_round = {}
            for sink in order[shift:] + order[:shift]:
                store = "off" if sink == "jsonl" else "sqlite"
                writer = "thread" if sink == "jsonl" else sink
                elapsed, envelopes = timed_run(tmp / f"{name}-{r}-{sink}", store, bodies,
                                               writer=writer)
                this_round[sink] = spans / elapsed
                rates[sink].append(spans / elapsed)
            for w in writers:
                ratios[w].append(this_round[w] / this_round["jsonl"])
        rows.append({"case": name, "spans": spans, "envelopes": envelopes,
                     "rates": rates, "ratios": ratios})
    return rows


def session_page(turns: int, repeats: int, tmp: Path) -> dict[str, Any]:
    out = tmp / "demo"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "otel_agent_context", "demo", "--out", str(out),
                    "--turns", str(turns)], check=True, capture_output=True, timeout=600)
    demo_s = time.perf_counter() - started
    with sqlite3.connect(out / "context.db") as raw:
        [(stored,)] = raw.execute("SELECT COUNT(*) FROM envelopes").fetchall()
        [(items,)] = raw.execute("SELECT COUNT(*) FROM items").fetchall()
    store = open_store(str(out / "context.db"), durable=False)
    server = UiServer(store, Endpoint("127.0.0.1", 0))
    url = f"http://127.0.0.1:{server.start()}/sessions/conv-0000"
    http_ms, render_ms = [], []
    size = 0
    try:
        for _ in range(2):  # warm: templates compiled, pages of the database cached
            urllib.request.urlopen(url, timeout=30).read()
        for _ in range(repeats):
            start = time.perf_counter()
            size = len(urllib.request.urlopen(url, timeout=30).read())
            http_ms.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            html = render_session(store, "conv-0000")
            render_ms.append((time.perf_counter() - start) * 1e3)
            assert html is not None and html.count('class="turn"') == turns
    finally:
        server.stop()
        store.close()
    return {"turns": turns, "stored": stored, "items": items, "demo_s": demo_s,
            "http_ms": http_ms, "render_ms": render_ms, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 rounds, 40 turns, 5 repeats")
    parser.add_argument("--only", choices=("throughput", "page"), help="one of the two")
    parser.add_argument("--writers", default=",".join(WRITERS),
                        help="store.writer values to measure, comma-separated "
                             "(thread is the store as main wrote it before the process)")
    parser.add_argument("--all-cores", action="store_true",
                        help="do not pin to one core (the store's thread overlaps the emitter)")
    parser.add_argument("--concurrent", action="store_true",
                        help="ingest while the emitter's thread writes, as serve does "
                             "(default: ingest every request, then emit)")
    args = parser.parse_args(argv)
    global CONCURRENT
    CONCURRENT = args.concurrent
    if args.quick:
        args.rounds, args.turns, args.repeats = 3, 40, 5
    if hasattr(os, "sched_setaffinity") and not args.all_cores:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    tune_gc()
    with tempfile.TemporaryDirectory(prefix="store-bench-") as directory:
        tmp = Path(directory)
        rows = (throughput(args.rounds, args.requests, tmp, tuple(args.writers.split(",")))
                if args.only != "page" else [])
        page = session_page(args.turns, args.repeats, tmp) if args.only != "throughput" else None
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    pinned = "all cores" if args.all_cores else "pinned to one"
    if args.concurrent:
        pinned += "; ingest and emitter concurrent"
    print(f"machine: {cpu}, {os.cpu_count()} cores ({pinned}), "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"SQLite {sqlite3.sqlite_version}, jinja2 {version('jinja2')}, "
          f"aiohttp {version('aiohttp')}, rounds {args.rounds}, fsync on (both sinks)")
    print()
    print("| case | spans (envelopes) per round | store.writer | JSON Lines alone, spans/s | "
          "with the SQLite store, spans/s | store vs alone (median of rounds) | goal |")
    print("|---|---:|---|---:|---:|---:|---|")
    for row in rows:
        jsonl = row["rates"]["jsonl"]
        for writer, ratios in row["ratios"].items():
            ratio = statistics.median(ratios)
            verdict = "met" if ratio >= 0.9 else f"MISSED by {(0.9 - ratio) * 100:.0f} points"
            rates = row["rates"][writer]
            print(f"| {row['case']} | {row['spans']:,} ({row['envelopes']}) | {writer} | "
                  f"{statistics.median(jsonl):,.0f} ({_spread(jsonl)}) | "
                  f"{statistics.median(rates):,.0f} ({_spread(rates)}) | "
                  f"{ratio:.3f}x ({min(ratios):.3f}–{max(ratios):.3f}) | "
                  f">= 0.90x: {verdict} |")
    print()
    if page is None:
        return 0
    http = statistics.median(page["http_ms"])
    verdict = "met" if http < 300 else f"MISSED by {http - 300:.0f} ms"
    print(f"session page, {page['turns']} turns ({page['stored']} envelopes, "
          f"{page['items']:,} item rows, {page['bytes'] / 1024:,.0f} KiB of HTML): "
          f"HTTP GET median {http:.1f} ms (p25–p75 "
          f"{statistics.quantiles(page['http_ms'], n=4)[0]:.1f}–"
          f"{statistics.quantiles(page['http_ms'], n=4)[2]:.1f}), rendering alone "
          f"{statistics.median(page['render_ms']):.1f} ms; goal < 300 ms: {verdict} "
          f"(the demo made the {page['turns']} turns in {page['demo_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
