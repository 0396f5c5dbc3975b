"""Throughput, memory and latency of the context processor, against the baselines of issue 3.

    python benchmarks/processor_bench.py [--rounds 7] [--quick] [--cases ctx20,sel100] [--grpc]

Everything runs in one process, one core (``os.sched_setaffinity`` pins it), on requests
serialised up front with the OTLP protobuf classes (what a receiver is handed):

- ``fast``: 512 HTTP-server spans of 10 attributes and no ``context.*``/``gen_ai.*``
  attribute, through the processor's ingest, against bare ``ParseFromString`` of the same
  requests. Goal: >= 0.5x.
- ``ctx20``: 512 context spans of 20 attributes (64 envelopes of 8 spans) and
- ``sel100``: 64 ``context.selection`` spans with 100 item events of 6 attributes each
  (8 envelopes of 8 spans), through ingest, against a naive parse-and-walk that turns every
  attribute of every span and event into Python objects and groups spans by trace. Goal:
  >= 0.8x. ``ingest`` is what the exporter waits for (decode, checks, WAL append and
  fsync, buffer); ``+emit`` adds the rebuild, metrics and the JSON Lines write of every
  completed envelope (the rest of the work, done by the emitter thread in ``serve``).
- memory: bytes per buffered span (tracemalloc), and 10,000 envelopes in flight against
  ``--max-traces 10000`` while 20,000 arrive (the cap holds, the oldest go out partial).
- latency: real gRPC on loopback, the processor in this process: from the ``Export`` call
  carrying an envelope's last span to its bundle written (p50, p99), at a steady rate.
- ``--grpc`` (ctx20 and sel100, after the in-process table, whose columns are unchanged):
  end to end over real gRPC on loopback, as ``serve`` runs. A client process pinned to the
  other core sends the same pre-serialised requests, one at a time (as an exporter does),
  through a raw-bytes gRPC stub to (a) a naive receiver, a grpcio server in this process
  whose generic ``Export`` handler does the naive parse-and-walk above and answers an empty
  response, and (b) the processor as ``serve`` runs it (``Processor``: its gRPC receiver,
  the emitter and sweeper threads running, WAL and JSON Lines fsync on; the bundle store
  off, as in the in-process rows). Both servers run in this process, pinned to one core,
  with the same number of gRPC worker threads. Timed from the first send (the client's
  clock, ``perf_counter`` is system-wide) until every request is acknowledged and, for
  the processor, every bundle is recorded written (JSON Lines written and fsynced, DONE
  appended: its queue empty, polled every 0.2 ms once the client reports its last ack,
  bounded at 60 s). Naive and processor alternate inside each round (which goes first
  alternates too); the ratio is taken per round, the table gives medians.

Prints a Markdown table of medians (per span, spans/s and ratios) and the machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.internal import api_implementation
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from otel_agent_context import _semconv as S
from otel_agent_context.processor import Processor, ProcessorConfig
from otel_agent_context.processor._metrics import MetricsRegistry
from otel_agent_context.processor._pipeline import Pipeline
from otel_agent_context.processor._server import tune_gc

SPANS_PER_REQUEST = 512
#: the cores allowed at start: the benchmark pins itself to the first, the gRPC client to
#: the others
_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
ENVELOPE_SIZE = 8  # the envelope span and 7 others


def _kv(out: Any, key: str, value: Any) -> None:
    kv: KeyValue = out.add()
    kv.key = key
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = value


def _request(round_id: int, make_spans: Any, count: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    _kv(rs.resource.attributes, "service.name", "bench")
    ss = rs.scope_spans.add()
    ss.scope.name = "bench"
    make_spans(ss.spans, round_id, count)
    return req.SerializeToString()


def _ids(span: Any, trace: int, index: int, parent: int | None) -> None:
    span.trace_id = trace.to_bytes(16, "big")
    span.span_id = (index + 1).to_bytes(8, "big")
    if parent is not None:
        span.parent_span_id = (parent + 1).to_bytes(8, "big")
    span.start_time_unix_nano = 1_700_000_000_000_000_000 + index * 1000
    span.end_time_unix_nano = span.start_time_unix_nano + 500


def fast_spans(spans: Any, round_id: int, count: int) -> None:
    for i in range(count):
        span = spans.add()
        _ids(span, (round_id << 32) + i, i, None)
        span.name = "GET /api/orders/{id}"
        span.kind = 2
        for key, value in (("http.request.method", "GET"), ("http.route", "/api/orders/{id}"),
                           ("http.response.status_code", 200), ("url.path", f"/api/orders/{i}"),
                           ("url.scheme", "https"), ("server.address", "orders.internal"),
                           ("server.port", 443), ("network.protocol.version", "1.1"),
                           ("user_agent.original", "bench/1.0"),
                           ("client.address", "10.0.0.7")):
            _kv(span.attributes, key, value)


_CTX20 = [
    (S.BUDGET_ID, "bud"), (S.BUDGET_TARGET, "model"), (S.BUDGET_MAX_TOKENS, 8192),
    (S.BUDGET_RESERVED_TOKENS, 1024), (S.BUDGET_MAX_BYTES, 65536), (S.BUDGET_MAX_ITEMS, 50),
    (S.BUDGET_ACTUAL_TOKENS, 7000), (S.BUDGET_ACTUAL_BYTES, 30000), (S.BUDGET_ACTUAL_ITEMS, 30),
    (S.BUDGET_OVERFLOW_STRATEGY, "truncate_middle"), (S.BUDGET_OVERFLOW, False),
    (S.BUDGET_OVERFLOW_TOKENS, 0), (S.BUDGET_UTILIZATION, 0.85), (S.WINDOW_ID, "win"),
    ("context.bench.a", "x" * 16), ("context.bench.b", "y" * 16), ("context.bench.c", 3),
    ("context.bench.d", 0.5),
]  # + context.id and one more = 20 attributes


def _envelope_span(span: Any, trace: int, index: int, envelope: int, others: int) -> None:
    _ids(span, trace, index, None)
    span.name = "invoke_agent bench"
    for key, value in ((S.CONTEXT_ID, f"ctx-{trace:x}-{envelope}"), (S.CONTEXT_SCOPE, "turn"),
                       (S.CONTEXT_SPAN_COUNT, others), (S.GEN_AI_AGENT_NAME, "bench"),
                       (S.CONTEXT_SCHEMA_VERSION, "0.1"), (S.CONTEXT_PRODUCER, "bench/1"),
                       (S.CONTEXT_LIFECYCLE, "injected"),
                       (S.GEN_AI_OPERATION_NAME, "invoke_agent"),
                       (S.GEN_AI_CONVERSATION_ID, "conv-1"), (S.GEN_AI_REQUEST_MODEL, "m"),
                       *[(f"context.bench.e{j}", j) for j in range(10)]):
        _kv(span.attributes, key, value)


def ctx20_spans(spans: Any, round_id: int, count: int, *, withhold_envelope: bool = False
                ) -> None:
    for i in range(count):
        envelope, position = divmod(i, ENVELOPE_SIZE)
        trace = (round_id << 32) + envelope + 1
        span = spans.add()
        if position == 0:
            if withhold_envelope:
                spans.pop()
                continue
            _envelope_span(span, trace, i, envelope, ENVELOPE_SIZE - 1)
            continue
        _ids(span, trace, i, i - position)
        span.name = S.SPAN_BUDGET
        _kv(span.attributes, S.CONTEXT_ID, f"ctx-{trace:x}-{envelope}")
        _kv(span.attributes, "context.bench.pos", position)
        for key, value in _CTX20:  # ids and token counts differ span to span
            if key == S.BUDGET_ID:
                value = f"{value}-{trace:x}-{i}"
            elif key in (S.BUDGET_ACTUAL_TOKENS, S.BUDGET_ACTUAL_BYTES):
                value = value + (trace * 31 + i) % 997
            _kv(span.attributes, key, value)


def sel100_spans(spans: Any, round_id: int, count: int) -> None:
    for i in range(count):
        envelope, position = divmod(i, ENVELOPE_SIZE)
        trace = (round_id << 32) + envelope + 1
        span = spans.add()
        if position == 0:
            _envelope_span(span, trace, i, envelope, ENVELOPE_SIZE - 1)
            continue
        _ids(span, trace, i, i - position)
        span.name = S.SPAN_SELECTION
        for key, value in ((S.CONTEXT_ID, f"ctx-{trace:x}-{envelope}"),
                           (S.SELECTION_ID, f"sel-{i}"), (S.SELECTION_CANDIDATE_COUNT, 100),
                           (S.SELECTION_SELECTED_COUNT, 50), (S.SELECTION_OMITTED_COUNT, 50)):
            _kv(span.attributes, key, value)
        for e in range(100):
            event = span.events.add()
            event.time_unix_nano = span.start_time_unix_nano + e
            selected = e % 2 == 0
            event.name = S.EVENT_ITEM_SELECTED if selected else S.EVENT_ITEM_OMITTED
            for key, value in ((S.ITEM_ID, f"kb:doc:{(trace * 7 + e) % 5000}"),
                               (S.ITEM_KIND, "document_excerpt"),
                               (S.ITEM_TOKEN_ESTIMATE, 100 + (trace + e) % 900),
                               (S.ITEM_DIGEST, f"sha256:{e:064x}"),
                               (S.SELECTION_SCORE, 1.0 / (e + 1)),
                               (S.SELECTION_RANK, e + 1) if selected
                               else (S.OMISSION_REASON, "budget")):
                _kv(event.attributes, key, value)


# -- baselines -----------------------------------------------------------------------------------


def bare_parse(body: bytes) -> int:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    return len(req.resource_spans)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def naive_walk(body: bytes) -> int:
    """Parse, turn every attribute of every span and event into Python, group by trace."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    traces: dict[str, list[Any]] = {}
    for rs in req.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                attributes = {kv.key: _value(kv.value) for kv in s.attributes}
                events = [(e.name, e.time_unix_nano,
                           {kv.key: _value(kv.value) for kv in e.attributes})
                          for e in s.events]
                traces.setdefault(s.trace_id.hex(), []).append(
                    (s.span_id.hex(), s.parent_span_id.hex(), s.name, s.start_time_unix_nano,
                     s.end_time_unix_nano, attributes, events, resource))
    return len(traces)


# -- the processor -------------------------------------------------------------------------------


def _pipeline(directory: Path, **settings: Any) -> Pipeline:
    values = {"receivers.otlp_grpc.endpoint": "127.0.0.1:0", "metrics.endpoint": "off",
              "receivers.otlp_http.endpoint": "off", "output.dir": str(directory),
              "pipeline.queue_size": 10_000_000, "buffer.max_traces": 10_000_000,
              "buffer.max_spans": 100_000_000, "memory.max_bytes": 64 * 2**30,
              # the bundle store is measured on its own (benchmarks/store_bench.py); here the
              # JSON Lines sink alone, as in the results recorded before the store existed
              "store.url": "off"}
    values.update(settings)
    pipeline = Pipeline(ProcessorConfig.from_values(values), MetricsRegistry())
    pipeline.open(workers=False)
    return pipeline


CASES = (("fast", fast_spans, SPANS_PER_REQUEST, "bare ParseFromString", bare_parse),
         ("ctx20", ctx20_spans, SPANS_PER_REQUEST, "naive parse-and-walk", naive_walk),
         ("sel100", sel100_spans, 64, "naive parse-and-walk", naive_walk))


def throughput(rounds: int, requests: int, tmp: Path, only: set[str] | None = None
               ) -> list[dict[str, Any]]:
    """Baseline and processor alternate within each round (the machine may be shared: a
    ratio is taken inside a round, then the median over rounds). ``only``: these cases."""
    rows = []
    for name, make, per_request, baseline_name, baseline in CASES:
        if only is not None and name not in only:
            continue
        spans = requests * per_request
        base, ingest, total, ingest_ratio, total_ratio = [], [], [], [], []
        size = 0
        for r in range(rounds):
            # new trace ids every round, so every envelope is new to a fresh buffer
            bodies = [_request(r * requests + i + 1, make, per_request)
                      for i in range(requests)]
            size = len(bodies[0])
            pipeline = _pipeline(tmp / f"{name}-{r}")
            gc.collect()
            start = time.perf_counter()
            for body in bodies:
                baseline(body)
            base_us = (time.perf_counter() - start) / spans * 1e6
            gc.collect()
            start = time.perf_counter()
            for body in bodies:
                pipeline.ingest(body, "bench")
            middle = time.perf_counter()
            pipeline.emit_pending()
            end = time.perf_counter()
            pipeline.close(timeout=5)
            ingest_us = (middle - start) / spans * 1e6
            total_us = (end - start) / spans * 1e6
            base.append(base_us)
            ingest.append(ingest_us)
            total.append(total_us)
            ingest_ratio.append(base_us / ingest_us)
            total_ratio.append(base_us / total_us)
        median = statistics.median
        rows.append({"case": name, "baseline": baseline_name, "baseline_us": median(base),
                     "ingest_us": median(ingest), "total_us": median(total),
                     "ingest_ratio": median(ingest_ratio), "total_ratio": median(total_ratio),
                     "request_bytes": size, "spans_per_request": per_request})
    return rows


def memory(tmp: Path) -> dict[str, Any]:
    """Bytes per buffered span, and 10,000 envelopes in flight under --max-traces 10000."""
    per_request = SPANS_PER_REQUEST

    def incomplete(spans: Any, round_id: int, count: int) -> None:
        ctx20_spans(spans, round_id, count, withhold_envelope=True)

    envelopes_per_request = per_request // ENVELOPE_SIZE
    bodies = [_request(i + 1, incomplete, per_request)
              for i in range(20_000 // envelopes_per_request)]
    pipeline = _pipeline(tmp / "memory", **{"buffer.max_traces": 10_000,
                                            "wal.fsync": False})
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    half = len(bodies) // 2
    for body in bodies[:half]:
        pipeline.ingest(body, "bench")
    gc.collect()
    at_10k = tracemalloc.get_traced_memory()[0] - base
    in_flight = pipeline.buffer.envelopes_in_flight
    spans = pipeline.buffer.spans_in_flight
    for body in bodies[half:]:
        pipeline.ingest(body, "bench")
        pipeline.emit_pending()  # the evicted envelopes leave as partial bundles
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result = {
        "envelopes_in_flight": in_flight, "spans_in_flight": spans,
        "bytes_per_span": at_10k / spans, "mib_at_10k": at_10k / 2**20,
        "after_20k_envelopes": pipeline.buffer.envelopes_in_flight,
        "evicted": pipeline.buffer.evicted, "mib_after_20k": (current - base) / 2**20,
        "peak_mib": (peak - base) / 2**20,
    }
    pipeline.close(timeout=5)
    return result


class _Clock:
    """A sink recording when each envelope's bundle was written (after the JSON Lines)."""

    name = "clock"

    def __init__(self) -> None:
        self.written: dict[str, float] = {}

    def write(self, batch: Any) -> None:
        now = time.perf_counter()
        for (_, context_id), _, _ in batch:
            self.written[context_id] = now

    def close(self) -> None:
        return None


def latency(tmp: Path, envelopes: int, rate: float) -> dict[str, Any]:
    clock = _Clock()
    config = ProcessorConfig.from_values({
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0", "receivers.otlp_http.endpoint": "off",
        "metrics.endpoint": "127.0.0.1:0", "output.dir": str(tmp / "latency")})
    processor = Processor(config, sinks=[clock]).start()
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    sent: dict[str, float] = {}
    requests = []
    for i in range(envelopes):  # stage spans first, the envelope span last (as the SDK does)
        req = ExportTraceServiceRequest()
        req.ParseFromString(_request(10_000_000 + i, ctx20_spans, ENVELOPE_SIZE))
        spans = req.resource_spans[0].scope_spans[0].spans
        last = ExportTraceServiceRequest()
        last.CopyFrom(req)
        del last.resource_spans[0].scope_spans[0].spans[1:]
        del spans[0]
        context_id = last.resource_spans[0].scope_spans[0].spans[0].attributes[0].value
        requests.append((req, last, context_id.string_value))
    interval = 1.0 / rate
    start = time.perf_counter()
    for i, (stages, last, context_id) in enumerate(requests):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        stub.Export(stages, timeout=10)
        sent[context_id] = time.perf_counter()
        stub.Export(last, timeout=10)
    deadline = time.monotonic() + 30
    while len(clock.written) < envelopes and time.monotonic() < deadline:
        time.sleep(0.01)
    processor.stop()
    values = sorted((clock.written[c] - sent[c]) * 1e3 for c in sent if c in clock.written)
    return {"envelopes": len(values), "rate": rate,
            "p50_ms": values[len(values) // 2], "p99_ms": values[int(len(values) * 0.99) - 1],
            "max_ms": values[-1]}


# -- end to end over gRPC --------------------------------------------------------------------------

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_CASE_MAKERS = {"ctx20": (ctx20_spans, SPANS_PER_REQUEST), "sel100": (sel100_spans, 64)}


def _client() -> int:
    """The client process (``--client``): commands on stdin, one per line.

    ``prep CASE FIRST COUNT``: serialise COUNT requests (round ids FIRST, FIRST+1, ...);
    ``send ADDRESS``: send them one at a time, print the first send's and the last ack's
    ``perf_counter``; ``quit``."""
    bodies: list[bytes] = []
    channels: dict[str, Any] = {}
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        if command[0] == "prep":
            make, per_request = _CASE_MAKERS[command[1]]
            first, count = int(command[2]), int(command[3])
            bodies = [_request(first + i, make, per_request) for i in range(count)]
            gc.collect()
            print("ready", flush=True)
        elif command[0] == "send":
            address = command[1]
            if address not in channels:
                channel = grpc.insecure_channel(address, options=[
                    ("grpc.max_send_message_length", 64 * 2**20)])
                grpc.channel_ready_future(channel).result(timeout=10)
                channels[address] = channel.unary_unary(_EXPORT)  # bytes in, bytes out
            export = channels[address]
            start = time.perf_counter()
            for body in bodies:
                export(body, timeout=60)
            end = time.perf_counter()
            print(f"{start!r} {end!r}", flush=True)
    return 0


class _NaiveServer:
    """A grpcio server whose Export handler does the naive parse-and-walk."""

    def __init__(self, workers: int) -> None:
        from concurrent import futures

        def export(request: bytes, context: Any) -> bytes:
            naive_walk(request)
            return b""  # an empty ExportTraceServiceResponse

        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="naive"),
            options=[("grpc.max_receive_message_length", 64 * 2**20),
                     ("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)}),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(1).wait(2)


class _ClientProcess:
    def __init__(self) -> None:
        pin = set(_CORES[1:]) if len(_CORES) > 1 else None
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--client"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the client process ended on {line!r}")
        return answer

    def send(self, address: str) -> tuple[float, float]:
        start, end = self.ask(f"send {address}").split()
        return float(start), float(end)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=10)


def _processor(directory: Path) -> Processor:
    config = ProcessorConfig.from_values({
        "receivers.otlp_grpc.endpoint": "127.0.0.1:0", "receivers.otlp_http.endpoint": "off",
        "metrics.endpoint": "off", "output.dir": str(directory),
        "pipeline.queue_size": 10_000_000, "buffer.max_traces": 10_000_000,
        "buffer.max_spans": 100_000_000, "memory.max_bytes": 64 * 2**30,
        "store.url": "off"})
    return Processor(config).start()


def _written_lines(directory: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in directory.glob("*.jsonl")
               if path.name != "dead-letter.jsonl")


def end_to_end(rounds: int, requests: int, tmp: Path, only: set[str] | None = None
               ) -> list[dict[str, Any]]:
    """Naive receiver and processor over gRPC, alternating within each round."""
    rows = []
    client = _ClientProcess()
    workers = ProcessorConfig.from_values({}).grpc_workers
    naive = _NaiveServer(workers)
    try:
        for name, (_, per_request) in _CASE_MAKERS.items():
            if only is not None and name not in only:
                continue
            spans = requests * per_request
            envelopes = spans // ENVELOPE_SIZE
            base, ours, ratio = [], [], []
            for r in range(rounds):
                first = 50_000_000 + r * requests + 1  # new trace ids every round
                assert client.ask(f"prep {name} {first} {requests}") == "ready"
                directory = tmp / f"grpc-{name}-{r}"
                processor = _processor(directory)
                pipeline = processor.pipeline
                timings: dict[str, float] = {}
                gc.collect()
                for which in (("naive", "ours") if r % 2 == 0 else ("ours", "naive")):
                    if which == "naive":
                        start, acked = client.send(naive.address)
                        timings["naive"] = acked - start
                        continue
                    start, acked = client.send(processor.addresses["otlp_grpc"])
                    deadline = time.monotonic() + 60
                    while ((pipeline.queue_size or pipeline.buffer.envelopes_in_flight)
                           and time.monotonic() < deadline):
                        time.sleep(0.0002)
                    timings["ours"] = max(time.perf_counter(), acked) - start
                    gc.collect()
                processor.stop()
                written = _written_lines(directory)
                if written != envelopes:
                    raise RuntimeError(f"{name} round {r}: {written} bundles written, "
                                       f"{envelopes} expected")
                base.append(timings["naive"] / spans * 1e6)
                ours.append(timings["ours"] / spans * 1e6)
                ratio.append(timings["naive"] / timings["ours"])
            median = statistics.median
            rows.append({"case": name, "baseline_us": median(base), "total_us": median(ours),
                         "ratio": median(ratio), "ratios": ratio,
                         "spans_per_request": per_request})
    finally:
        naive.stop()
        client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=8, help="requests per round")
    parser.add_argument("--quick", action="store_true", help="3 rounds, fewer envelopes")
    parser.add_argument("--cases", help="throughput of these cases only (comma-separated: "
                        + ", ".join(case[0] for case in CASES) + "); no memory or latency")
    parser.add_argument("--grpc", action="store_true",
                        help="also end to end over gRPC (ctx20, sel100): naive receiver "
                        "against the processor as serve runs it")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        return _client()
    only = set(args.cases.split(",")) if args.cases else None
    rounds = 3 if args.quick else args.rounds
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {_CORES[0]})
    tune_gc()  # as `serve` does
    if api_implementation.Type() != "upb":
        print(f"WARNING: protobuf backend is {api_implementation.Type()}, not upb",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="processor-bench-") as directory:
        tmp = Path(directory)
        rows = throughput(rounds, args.requests, tmp, only)
        grpc_rows = end_to_end(rounds, args.requests, tmp, only) if args.grpc else []
        mem = memory(tmp) if only is None else None
        lat = latency(tmp, 300 if args.quick else 1000, 200.0) if only is None else None
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"machine: {cpu}, {os.cpu_count()} cores (pinned to one), gc threshold "
          f"{gc.get_threshold()} (as serve), "
          f"{platform.python_implementation()} {platform.python_version()}, "
          f"protobuf {version('protobuf')} ({api_implementation.Type()}), "
          f"grpcio {version('grpcio')}, opentelemetry-proto {version('opentelemetry-proto')}, "
          f"orjson {version('orjson')}, rounds {rounds}")
    print()
    print("| case | baseline | baseline µs/span | ingest µs/span | ingest spans/s | "
          "ingest vs baseline | ingest+emit µs/span | ingest+emit vs baseline |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['case']} ({row['spans_per_request']} spans/request, "
              f"{row['request_bytes'] // 1024} KiB) | {row['baseline']} | "
              f"{row['baseline_us']:.2f} | {row['ingest_us']:.2f} | "
              f"{1e6 / row['ingest_us']:,.0f} | {row['ingest_ratio']:.2f}x | "
              f"{row['total_us']:.2f} | {row['total_ratio']:.2f}x |")
    if grpc_rows:
        print()
        print("end to end over gRPC (client on the other core; naive receiver and processor "
              "in this process, alternating):")
        print()
        print("| case | naive receiver µs/span | processor µs/span (acked + written) | "
              "processor vs naive | per round |")
        print("|---|---:|---:|---:|---|")
        for row in grpc_rows:
            print(f"| {row['case']} ({row['spans_per_request']} spans/request) | "
                  f"{row['baseline_us']:.2f} | {row['total_us']:.2f} | {row['ratio']:.2f}x | "
                  + ", ".join(f"{x:.2f}" for x in row["ratios"]) + " |")
    if mem is None or lat is None:
        return 0
    print()
    print(f"memory: {mem['bytes_per_span']:.0f} bytes per buffered 20-attribute span; "
          f"{mem['envelopes_in_flight']:,} envelopes ({mem['spans_in_flight']:,} spans) in "
          f"flight = {mem['mib_at_10k']:.1f} MiB; after 20,000 more under --max-traces 10000: "
          f"{mem['after_20k_envelopes']:,} in flight, {mem['evicted']:,} emitted partial "
          f"(evicted), {mem['mib_after_20k']:.1f} MiB held, peak {mem['peak_mib']:.1f} MiB")
    print(f"latency (gRPC loopback, {lat['rate']:.0f} envelopes/s of 8 spans, envelope span "
          f"last, fsync on): last span sent -> bundle written p50 {lat['p50_ms']:.2f} ms, "
          f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms over "
          f"{lat['envelopes']} envelopes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
