"""Instructions per span of the processor's steps and of the naive parse-and-walk, on the
requests of ``processor_bench.py`` (callgrind): a count that the machine's load does not
move. Issue 10.

    python benchmarks/processor_ir.py [--cases ctx20,sel100] [--calls 3]

Each case runs in a process of its own under ``valgrind --tool=callgrind
--instr-atstart=no`` (Debian's ``valgrind`` package), ``PYTHONHASHSEED=0``. The process
builds its requests, warms every step up once, then callgrind counts only around each
step's ``--calls`` calls (``callgrind_control -i on`` / ``off``, then a dump), with the
garbage collector off while it counts. Steps:

- ``naive``: the baseline, ``processor_bench.naive_walk`` (parse, every attribute of every
  span and event into Python, grouped by trace);
- ``parse``: the validating parse with the generated classes (``parse_protobuf``);
- ``decode``: ``decode_request`` of a request with new ids (first seen by the cache);
- ``ingest``: ``Pipeline.ingest`` of a new request into a new pipeline (parse, decode, WAL
  append and ``fdatasync``, buffer): what an exporter waits for;
- ``total``: ``ingest`` and then ``emit_pending`` (rebuild, metrics, the JSON Lines write):
  the end-to-end figure compared with ``naive``;
- ``rebuild``, ``encode``, ``measure``: the emit steps alone on the bundles of one request.

Instructions are not time (upb's C and Python's bytecode differ in cost per instruction,
cache misses and ``fdatasync`` are not weighed), but they rank differences of a few percent
that a timing run on a shared machine cannot.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind  # noqa: E402

STEPS = ("naive", "parse", "decode", "ingest", "total", "rebuild", "encode", "measure")
CASES = {"ctx20": 512, "sel100": 64}  # spans a request


def _child(case: str, calls: int) -> None:
    import processor_bench as bench

    from otel_agent_context._measure import measure
    from otel_agent_context.processor import _decode
    from otel_agent_context.processor._metrics import MetricsRegistry
    from otel_agent_context.processor._server import tune_gc
    from otel_agent_context.rebuild import rebuild_envelope
    from otel_agent_context.rebuild._encode import encode_bundle

    tune_gc()
    make = {"ctx20": bench.ctx20_spans, "sel100": bench.sel100_spans}[case]
    per = CASES[case]
    body = bench._request(5, make, per)
    groups: dict[tuple[str, str], list[Any]] = {}
    for accepted in _decode.decode_request(body, _decode.parse_protobuf(body)).accepted:
        groups.setdefault((accepted.view.trace_id, accepted.context_id), []).append(
            accepted.view)
    envelopes = list(groups.values())
    bundles = [rebuild_envelope(spans) for spans in envelopes]
    registry = MetricsRegistry()
    fresh = iter(range(1000, 10**6))  # new ids for every call (and the warm-up)
    tmp = Path(tempfile.mkdtemp(prefix="processor-ir-"))

    def new_body() -> bytes:
        return bench._request(next(fresh), make, per)

    def prepared(n: int, with_pipeline: bool) -> list[tuple[bytes, Any]]:
        return [(new_body(), bench._pipeline(tmp / str(next(fresh))) if with_pipeline
                 else None) for _ in range(n)]

    def stepper(step: str) -> Any:
        if step == "naive":
            return lambda: bench.naive_walk(body)
        if step == "parse":
            return lambda: _decode.parse_protobuf(body)
        if step in ("decode", "ingest", "total"):
            work = prepared(calls + 1, step != "decode")

            def one() -> None:
                request, pipeline = work.pop()
                if pipeline is None:
                    _decode.decode_request(request, _decode.parse_protobuf(request))
                    return
                pipeline.ingest(request, "bench")
                if step == "total":
                    pipeline.emit_pending()
            return one
        if step == "rebuild":
            return lambda: [rebuild_envelope(spans) for spans in envelopes]
        if step == "encode":
            return lambda: [encode_bundle(bundle) for bundle in bundles]
        return lambda: [registry.record(measure(bundle)) for bundle in bundles]

    for step in STEPS:
        fn = stepper(step)
        fn()  # warm-up: caches, lazy imports
        callgrind.count(fn, calls, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="ctx20,sel100")
    parser.add_argument("--calls", type=int, default=3, help="counted calls per step")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.calls)
        return
    if not callgrind.available():
        raise SystemExit("valgrind (callgrind) is not installed")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    print("| case | " + " | ".join(STEPS) + " | naive / total |")
    print("|---|" + "---:|" * (len(STEPS) + 1))
    for case in args.cases.split(","):
        counts = callgrind.run([sys.executable, __file__, "--child", case, "--calls",
                                str(args.calls)], env, args.calls * CASES[case])
        cells = " | ".join(f"{counts[step] / 1000:,.1f}" for step in STEPS)
        print(f"| {case} | {cells} | {counts['naive'] / counts['total']:.2f} |", flush=True)
    print("\nthousands of instructions per span")


if __name__ == "__main__":
    main()
