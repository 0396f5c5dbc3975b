"""Peak and settled RSS of ``serve`` under concurrent unauthenticated large gRPC calls.

    python benchmarks/grpc_auth_memory.py [--calls 16] [--mib 60] [--rounds 2] \
        [--tree PATH ...]

Starts ``otel-agent-context serve --bearer-token ...`` as a subprocess (with ``PYTHONPATH``
set to each ``--tree``, default this checkout, so an older checkout can be measured in the
same run), sends ``--calls`` concurrent ``TraceService/Export`` calls of ``--mib`` MiB each
without the token, ``--rounds`` times, and reads the server's ``VmHWM`` (peak RSS) and
``VmRSS`` from ``/proc``: at start, and two seconds after the last round. Every call must
end UNAUTHENTICATED (or be cut by the server: CANCELLED/UNAVAILABLE count as refused too).
Results: benchmarks/grpc_auth.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
import orjson

REPO = Path(__file__).resolve().parent.parent
METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) // 1024  # MiB
    return fields


def measure(tree: Path, calls: int, mib: int, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready.json"
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context", "serve", "--otlp-grpc", "127.0.0.1:0",
             "--otlp-http", "off", "--metrics", "off", "--out", tmp,
             "--bearer-token", "s3cret", "--ready-file", str(ready)],
            env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not ready.exists():
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit(f"serve from {tree} did not start")
                time.sleep(0.05)
            address = orjson.loads(ready.read_bytes())["otlp_grpc"]
            start = _status(process.pid)
            body = os.urandom(1024) * (mib * 1024)
            channel = grpc.insecure_channel(address, options=[
                ("grpc.max_send_message_length", -1)])
            export = channel.unary_unary(METHOD)
            codes: dict[str, int] = {}
            lock = threading.Lock()
            elapsed = []

            def one() -> None:
                try:
                    export(body, timeout=60)
                    code = "OK"
                except grpc.RpcError as exc:
                    code = exc.code().name
                with lock:
                    codes[code] = codes.get(code, 0) + 1

            for _ in range(rounds):
                began = time.perf_counter()
                threads = [threading.Thread(target=one) for _ in range(calls)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed.append(time.perf_counter() - began)
            channel.close()
            time.sleep(2)
            end = _status(process.pid)
            return {"tree": str(tree), "start_rss_mib": start["VmRSS"],
                    "peak_rss_mib": end["VmHWM"], "settled_rss_mib": end["VmRSS"],
                    "codes": codes, "seconds_per_round": [round(e, 2) for e in elapsed]}
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--mib", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", type=Path, action="append",
                        help="source tree(s) to measure (default: this checkout)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, grpcio {grpc.__version__}, "
          f"{args.calls} concurrent unauthenticated calls of {args.mib} MiB x {args.rounds}")
    for tree in args.tree or [REPO]:
        print(orjson.dumps(measure(tree.resolve(), args.calls, args.mib, args.rounds)).decode())


if __name__ == "__main__":
    main()
