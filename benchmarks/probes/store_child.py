"""Probe: where the store's child process spends its time, per envelope, piece by piece.

    python benchmarks/probes/store_child.py [--rounds 5] [--callgrind]

The child (``processor/_store_process.py``) receives each batch's JSON Lines lines (with the
index of the members the rows read, as the emitter makes it) and writes them with
``StoreSink.write``. Here the same lines (``processor_bench``'s ctx20 and
sel100 envelopes, rebuilt by the real pipeline with the JSON Lines sink alone) go through
each piece on its own, in this process, in batches of 256 lines as the emitter makes them:
decoding the lines (orjson), ``bundle_rows``, ``Store.write`` of decoded bundles, and the
child's whole work for a batch (decode and write), each into a fresh SQLite file (fsync on)
opened before and closed after what is measured; and, where the code sends batches in parts
(``BatchInParts``), the child's work for the same batches sent in parts of
``_STORE_PART_BYTES``, written in one transaction a batch. CPU-time medians of
``--rounds`` (the pieces alternate within each round); ``--callgrind`` counts instructions
instead (independent of the machine's load), one pass each.

Run it with ``PYTHONPATH=/path/to/another/checkout`` to measure that checkout's code (the
child's binding setup and ``write_lines`` are used when the code has them).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _callgrind  # noqa: E402
from processor_bench import ENVELOPE_SIZE, _pipeline, _request, ctx20_spans, sel100_spans  # noqa: E402

import otel_agent_context.processor._store_process as child  # noqa: E402
from otel_agent_context._store._rows import bundle_rows  # noqa: E402
from otel_agent_context.processor._store_sink import StoreSink  # noqa: E402

#: case: spans per request, requests (8 spans an envelope)
CASES = {"ctx20": (ctx20_spans, 512, 8), "sel100": (sel100_spans, 64, 8)}


def lines_of(case: str, tmp: Path) -> list[bytes]:
    make, per_request, requests = CASES[case]
    pipeline = _pipeline(tmp / f"lines-{case}")
    for i in range(requests):
        pipeline.ingest(_request(i + 1, make, per_request), "probe")
    pipeline.emit_pending()
    pipeline.close(timeout=5)
    return [line for path in sorted((tmp / f"lines-{case}").glob("bundles-*.jsonl"))
            for line in path.read_bytes().splitlines(keepends=True)]


def write_lines(sink: StoreSink, payload: bytes) -> None:
    if hasattr(child, "write_lines"):  # (and the payload as its code's parent sends it)
        child.write_lines(sink, payload)
        return
    lines = payload.splitlines(keepends=True)  # as the child did before write_lines
    sink.write([(("", ""), orjson.loads(line), line) for line in lines])


def pieces(lines: list[bytes], tmp: Path, tag: str
           ) -> dict[str, tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]]:
    """name: (set up, run, tear down)"""
    batches = [lines[i:i + 256] for i in range(0, len(lines), 256)]
    if hasattr(child, "request"):  # the index of the members the rows read, as the parent sends
        payloads = [child.request(batch, [child.encode_indexed(orjson.loads(line))[1]
                                          for line in batch]) for batch in batches]
    else:
        payloads = [b"".join(batch) for batch in batches]
    bundles = [orjson.loads(line) for line in lines]
    entries = [[(("", ""), orjson.loads(line), line) for line in batch] for batch in batches]
    counter = iter(range(10**9))
    sinks: list[StoreSink] = []

    def open_sink() -> None:
        sinks[:] = [StoreSink(str(tmp / f"{tag}-{next(counter)}.db"))]
        sinks[0].open()

    def close_sink() -> None:
        sinks[0].close()

    def nothing() -> None:
        pass

    pieces = {
        "decode": (nothing, lambda: [orjson.loads(line) for line in lines], nothing),
        "bundle_rows": (nothing, lambda: [bundle_rows(b) for b in bundles], nothing),
        "write (decoded)": (open_sink, lambda: [sinks[0].write(e) for e in entries],
                            close_sink),
        "child (decode + write)": (open_sink, lambda: [write_lines(sinks[0], p)
                                                       for p in payloads], close_sink),
    }
    if hasattr(child, "BatchInParts"):  # each batch sent in parts, as the emitter sends it
        in_parts = [_parts(batch, number) for number, batch in enumerate(batches)]

        def write_parts() -> None:
            parts = child.BatchInParts(sinks[0])
            for requests in in_parts:
                for payload in requests:
                    parts.take(payload)
                parts.finish()

        pieces["child in parts (decode + write)"] = (open_sink, write_parts, close_sink)
    return pieces


def _parts(batch: list[bytes], number: int) -> list[bytes]:
    """The requests of one batch sent in parts of ``_STORE_PART_BYTES`` (the last one the
    rest, perhaps empty), as ``Pipeline._emit`` cuts them."""
    from otel_agent_context.processor._pipeline import _STORE_PART_BYTES

    requests: list[bytes] = []
    start = size = 0
    for at, line in enumerate(batch, 1):
        size += len(line)
        if size >= _STORE_PART_BYTES:
            requests.append(_part(batch[start:at], number, len(requests), False))
            start, size = at, 0
    requests.append(_part(batch[start:], number, len(requests), True))
    return requests


def _part(lines: list[bytes], batch: int, number: int, last: bool) -> bytes:
    return child.request(lines, [child.encode_indexed(orjson.loads(line))[1] for line in lines],
                         child.part_head(batch, number, last))


def main(argv: list[str] | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="store-child-") as tmp:
        return _main(argv, Path(tmp))


def _main(argv: list[str] | None, tmp: Path) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if hasattr(child, "bind_plainly"):
        child.bind_plainly()  # as the child process does
    if args.callgrind and not args.child:
        for case, (_, per_request, requests) in CASES.items():
            counts = _callgrind.run([sys.executable, __file__, "--child", case],
                                    dict(os.environ), per_request * requests // ENVELOPE_SIZE)
            print(f"{case}: " + ", ".join(f"{k} {v / 1e3:,.0f}K" for k, v in counts.items())
                  + " instructions an envelope", flush=True)
        return 0
    if args.child:
        lines = lines_of(args.child, tmp)
        for name, (set_up, fn, tear_down) in pieces(lines, tmp, args.child).items():
            set_up()
            fn()  # warm
            tear_down()
            set_up()
            _callgrind.count(fn, 1, name.split(" (")[0].replace(" ", "-"))
            tear_down()
        return 0
    for case in CASES:
        lines = lines_of(case, tmp)
        spent: dict[str, list[float]] = {}
        for r in range(args.rounds):
            named = list(pieces(lines, tmp, f"{case}-{r}").items())
            shift = r % len(named)
            for name, (set_up, fn, tear_down) in named[shift:] + named[:shift]:
                set_up()
                gc.collect()
                start = time.thread_time()
                fn()
                spent.setdefault(name, []).append((time.thread_time() - start) / len(lines) * 1e6)
                tear_down()
        print(f"{case} ({len(lines)} envelopes, {sum(map(len, lines)) / len(lines):,.0f} "
              f"bytes each): " + ", ".join(f"{k} {statistics.median(v):,.1f} µs"
                                          for k, v in spent.items()) + " (CPU, medians)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
