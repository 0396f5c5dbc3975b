"""Keyed digests against plain ones: per digest, and per auto-instrumented model call.

    python benchmarks/digest_bench.py [--rounds 7] [--calls 200]

Interleaved rounds in one process: the digest mode is switched between rounds
(``OTEL_AGENT_CONTEXT_DIGEST=sha256`` or the default ``hmac-sha256``). Per digest: a short
text (20 bytes) and a kilobyte. Per call: caller-thread CPU (``time.thread_time``) of an
OpenAI chat completion of 8 messages through our instrumentor against the local stub.
Medians. Goal (issue 15): no measurable change in the per-call cost.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import openai
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_context import _digest
from otel_agent_context.instrumentation._stub import StubServer
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

MESSAGES = [{"role": "system", "content": "You are a support agent for an online shop."}] + [
    {"role": "user" if i % 2 == 0 else "assistant",
     "content": f"Message {i}: where is my order number {1000 + i}? It was due last week."}
    for i in range(7)]


def _mode(mode: str) -> None:
    if mode == "sha256":
        os.environ["OTEL_AGENT_CONTEXT_DIGEST"] = "sha256"
    else:
        os.environ.pop("OTEL_AGENT_CONTEXT_DIGEST", None)
    _digest.reset()


def _per_digest(size: int, n: int = 20000) -> float:
    data = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        _digest.digest_bytes(data)
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args(argv)
    provider = TracerProvider()
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=provider)
    results: dict[str, dict[str, list[float]]] = {
        m: {"short": [], "kilobyte": [], "call": []} for m in ("sha256", "hmac-sha256")}
    with StubServer() as stub:
        client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="sk-test", max_retries=0)
        for _ in range(args.rounds):
            for mode in ("sha256", "hmac-sha256"):
                _mode(mode)
                results[mode]["short"].append(_per_digest(20))
                results[mode]["kilobyte"].append(_per_digest(1024))
                for _ in range(args.calls):
                    start = time.thread_time()
                    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
                    results[mode]["call"].append((time.thread_time() - start) * 1e6)
    inst.uninstrument()
    _mode("hmac-sha256")
    print(f"machine: {platform.machine()}, CPython {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds, "
          f"{args.calls} calls a round")
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in results.items()}
    for key, unit in (("short", "us a 20-byte digest"), ("kilobyte", "us a 1 KiB digest"),
                      ("call", "us caller CPU an instrumented call")):
        plain, keyed = med["sha256"][key], med["hmac-sha256"][key]
        print(f"  {unit:<36} sha256 {plain:8.2f}  hmac-sha256 {keyed:8.2f}  "
              f"({(keyed / plain - 1) * 100:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
