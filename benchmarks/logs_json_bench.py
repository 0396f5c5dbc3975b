"""OTLP/JSON logs: requests/s on one keep-alive connection to ``serve``'s ``/v1/logs``, this
checkout against one before the direct reader (``--old``), and the JSON -> protobuf step
alone in process (the direct reader against ``json_format.ParseDict``).

    python benchmarks/logs_json_bench.py --old /path/to/checkout [--rounds 3] [--seconds 3]

The body: the OpenTelemetry SDK's own log records (its ``LoggerProvider`` and OTLP encoder)
written as OTLP/JSON (hex ids, lowerCamelCase): 25 records a request, each with a body, a
severity and 8 attributes, none a context event (so the server's JSON step and HTTP cost
dominate; the records are counted and ignored after it). Rounds are interleaved (old, new
each round); medians over rounds. Results: benchmarks/http_server.md.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_server_bench import REPO, _json_rate, _start, stop, timed  # noqa: E402

RECORDS = 25


def _body() -> bytes:
    from google.protobuf import json_format
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("bench")
    tracer = TracerProvider().get_tracer("bench")
    with tracer.start_as_current_span("turn"):
        for i in range(RECORDS):
            logger.emit(severity_number=SeverityNumber.INFO, body=f"step {i} done",
                        attributes={"app.step": i, "app.ok": True, "app.ms": 1.5 * i,
                                    "app.user": "u-123", "app.route": "/agent/run",
                                    "app.tags": ["a", "b"], "app.model": "gpt-x",
                                    "app.region": "eu"})
    document = json_format.MessageToDict(encode_logs(memory.get_finished_logs()))
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:  # OTLP/JSON ids are hex, not base64
                        record[key] = base64.b64decode(record[key]).hex()
    return orjson.dumps(document)


def _in_process(body: bytes, rounds: int) -> dict[str, float]:
    """Microseconds per request of the JSON -> protobuf step, direct reader and ParseDict."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from otel_agent_context.processor._decode import fast_json
    from otel_agent_context.processor._decode_logs import logs_json_to_protobuf

    def parse_dict() -> Any:
        document = orjson.loads(body)
        for resource in document["resourceLogs"]:
            for scope in resource["scopeLogs"]:
                for record in scope["logRecords"]:
                    for key in ("traceId", "spanId"):
                        record[key] = base64.b64encode(bytes.fromhex(record[key])).decode()
        return json_format.ParseDict(document, ExportLogsServiceRequest(),
                                     ignore_unknown_fields=True)

    assert fast_json(orjson.loads(body), ExportLogsServiceRequest()) == parse_dict()
    times: dict[str, list[float]] = {"direct": [], "ParseDict": []}
    for _ in range(rounds):
        for name, step in (("direct", lambda: logs_json_to_protobuf(body)),
                           ("ParseDict", parse_dict)):
            began = time.perf_counter()
            for _ in range(50):
                step()
            times[name].append((time.perf_counter() - began) / 50 * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--old", type=Path, required=True,
                        help="a checkout whose /v1/logs JSON goes through ParseDict")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}, python {sys.version.split()[0]}")
    body = _body()
    print(f"body {len(body)} bytes, {RECORDS} records")
    step = _in_process(body, args.rounds)
    print(f"JSON -> protobuf in process: direct {step['direct']:.0f} us, "
          f"ParseDict {step['ParseDict']:.0f} us a request")
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        servers = {"old": _start("old", args.old, tmp), "new": _start("new", REPO, tmp)}
        try:
            for round_ in range(args.rounds):
                for name, (process, address) in servers.items():
                    results.setdefault(name, []).append(
                        timed(process.pid, _json_rate, address, body, args.seconds, "/v1/logs"))
                print(f"round {round_ + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}")
        finally:
            stop(servers.values())
    print("\n| /v1/logs OTLP/JSON | requests/s on one connection | server CPU µs/request |")
    print("|---|---:|---:|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):.0f} | "
              f"{statistics.median(v[1] for v in values):.0f} |")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
