"""What finding block sources costs a model call (issue 12, item 4).

    python benchmarks/block_sources_bench.py [--calls 300] [--rounds 7]

The real ``openai`` client with our instrumentor, answered in process by an ``httpx``
mock transport (no network: the instrumentation's own cost is what moves), inside an
envelope, content capture off, spans dropped by a ``BatchSpanProcessor``:

- ``plain``: a system prompt and 9 history messages, nothing selected in the envelope (every
  model call of an agent without retrieval: what the bookkeeping costs when nothing is
  compared);
- ``rag``: the same call after a selection of 4 retrieved documents (~600 characters each),
  2 of which the system prompt carries (the texts are compared; the first call of a block
  searches, a block seen again with the same items is a cache hit);
- ``rag-new``: as ``rag``, but the system prompt changes every call (always searched).

Each round times a block of calls per mode, modes rotating; medians of the caller thread's
CPU time (``thread_time_ns``) per call. Run it on this tree and on a checkout before the
change (``PYTHONPATH=/path/to/before python benchmarks/block_sources_bench.py``) for the
difference; ``--links`` also times ``Links.sources`` alone for the ``rag`` request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
import openai
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import otel_agent_context
from otel_agent_context import AgentContext, ContextItem
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

WORDS = ["refund", "order", "parcel", "warehouse", "invoice", "customer", "return", "policy",
         "days", "shipping", "courier", "address", "payment", "receipt", "label", "support",
         "weekday"]


def _doc(seed: int, chars: int = 600) -> str:
    out, i = [], seed
    while sum(len(w) + 1 for w in out) < chars:
        out.append(WORDS[(i * 7 + seed) % len(WORDS)])
        i += 1
    return f"Document {seed}: " + " ".join(out) + "."


DOCS = [_doc(i) for i in range(4)]
HISTORY = [{"role": "user" if i % 2 == 0 else "assistant",
            "content": f"Message {i} of the conversation about order {1000 + i}, "
                       f"with a few more words to look like a real turn."} for i in range(9)]


def _messages(system_extra: str, docs: Sequence[str]) -> list[dict[str, Any]]:
    system = "You are a support agent. Answer from these notes.\n\n" + "\n\n".join(docs)
    return [{"role": "system", "content": system + system_extra}, *HISTORY]


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _reply(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    return httpx.Response(200, json={
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_800_000_000,
        "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Within 14 days."}}],
        "usage": {"prompt_tokens": 420, "completion_tokens": 5, "total_tokens": 425}})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--links", action="store_true")
    args = parser.parse_args(argv)

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    ctx = AgentContext(tracer_provider=provider, capture_content=False)
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=provider, agent_context=ctx)
    client = openai.OpenAI(api_key="sk-bench", base_url="http://bench.invalid/v1",
                           max_retries=0, http_client=httpx.Client(
                               transport=httpx.MockTransport(_reply)))
    counter = [0]

    def call(rag: bool, fresh: bool) -> int:
        extra = f"\n(call {counter[0]})" if fresh else ""
        counter[0] += 1
        messages = _messages(extra, DOCS[:2])
        start = time.thread_time_ns()
        with ctx.envelope(agent_name="bench") as env:
            if rag:
                with env.selection(intent="retrieval") as sel:
                    for i, text in enumerate(DOCS):
                        sel.selected(ContextItem(item_id=f"doc_{i}",
                                                 context_kind="retrieval_result",
                                                 content=text), rank=i + 1)
            client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        return time.thread_time_ns() - start

    modes = {"plain": (False, False), "rag": (True, False), "rag-new": (True, True)}
    for rag, fresh in modes.values():
        for _ in range(30):
            call(rag, fresh)
    times: dict[str, list[int]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            rag, fresh = modes[name]
            times[name].extend(call(rag, fresh) for _ in range(args.calls))
    inst.uninstrument()
    provider.shutdown()

    print(f"package: {otel_agent_context.__file__}")
    print(f"{args.rounds} rounds x {args.calls} calls a mode; caller CPU per envelope + call")
    print("| mode | median µs | p90 µs |")
    print("|---|---:|---:|")
    for name, values in times.items():
        values.sort()
        print(f"| {name} | {statistics.median(values) / 1000:.1f} | "
              f"{values[int(len(values) * 0.9)] / 1000:.1f} |")

    if args.links:
        from otel_agent_context._links import Links

        links = Links()
        for i, text in enumerate(DOCS):
            links.selected(f"doc_{i}", text)
        blocks = [(f"m{i}", f"digest-{i}", m["content"])
                  for i, m in enumerate(_messages("", DOCS[:2]))]
        n = 20_000
        start = time.perf_counter_ns()
        for _ in range(n):
            links.sources(blocks)  # cache hits after the first
        hit = (time.perf_counter_ns() - start) / n / 1000
        fresh_blocks = [(b[0], None, b[2]) for b in blocks]  # no digest: always searched
        start = time.perf_counter_ns()
        for _ in range(n // 10):
            links.sources(fresh_blocks)
        miss = (time.perf_counter_ns() - start) / (n // 10) / 1000
        chars = sum(len(b[2]) for b in blocks)
        print(f"Links.sources, 10 blocks ({chars} chars), 4 documents: "
              f"searched {miss:.1f} µs, cached {hit:.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
