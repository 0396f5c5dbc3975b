"""Added latency per instrumented LLM client call, against the same call uninstrumented.

    python benchmarks/instrumentation_bench.py [--calls 400] [--rounds 5]

Real ``openai`` and ``anthropic`` clients call the bundled loopback stub
(``otel_agent_context.instrumentation._stub``), run in a process of its own. Each
scenario is timed in rounds that alternate uninstrumented and instrumented blocks (so
drift of the machine hits both alike); the reported numbers are medians over all calls.
"Instrumented" is our instrumentor alone with the OpenTelemetry SDK (a
``BatchSpanProcessor`` with an exporter that drops the spans, so the export cost, which
happens off the call path, is not counted) and content capture off. Results go to stdout
as a Markdown table (benchmarks/instrumentation.md records one run).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


HISTORY = [{"role": "system", "content": "You are ACME's support agent. " * 20}]
for i in range(4):
    HISTORY.append({"role": "user", "content": f"Question {i} about my order? " * 8})
    HISTORY.append({"role": "assistant", "content": f"Answer {i} about the order. " * 12})
HISTORY.append({"role": "user", "content": "And when will it arrive?"})
ANTHROPIC_MESSAGES = HISTORY[1:]
ANTHROPIC_SYSTEM = [{"type": "text", "text": HISTORY[0]["content"],
                     "cache_control": {"type": "ephemeral"}}]


class _Remote:
    """The stub in its own process, so its serving thread does not share our GIL."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context.instrumentation._stub"],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.openai_base_url = f"{self.url}/v1"
        self.anthropic_base_url = self.url

    def __enter__(self) -> _Remote:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def scenarios(stub: Any) -> dict[str, Callable[[], Any]]:
    oa = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-bench", max_retries=0)
    an = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-bench",
                             max_retries=0)
    aoa = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-bench", max_retries=0)
    loop = asyncio.new_event_loop()

    def chat() -> Any:
        return oa.chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                          max_completion_tokens=300)

    def chat_stream() -> Any:
        stream = oa.chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                            max_completion_tokens=300, stream=True,
                                            stream_options={"include_usage": True})
        for _ in stream:
            pass

    def chat_async() -> Any:
        return loop.run_until_complete(aoa.chat.completions.create(
            model="gpt-4o-mini", messages=HISTORY, max_completion_tokens=300))

    def responses() -> Any:
        return oa.responses.create(model="gpt-4o-mini", input=HISTORY[1:],
                                   instructions=HISTORY[0]["content"], max_output_tokens=300)

    def messages() -> Any:
        return an.messages.create(model="claude-sonnet-4-6", max_tokens=300,
                                  system=ANTHROPIC_SYSTEM, messages=ANTHROPIC_MESSAGES)

    def messages_stream() -> Any:
        with an.messages.stream(model="claude-sonnet-4-6", max_tokens=300,
                                system=ANTHROPIC_SYSTEM, messages=ANTHROPIC_MESSAGES) as s:
            for _ in s:
                pass

    return {"openai chat.completions": chat, "openai chat.completions stream": chat_stream,
            "openai chat.completions async": chat_async, "openai responses": responses,
            "anthropic messages": messages, "anthropic messages.stream": messages_stream}


def _time(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per scenario and mode")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks")
    args = parser.parse_args(argv)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    per_block = max(args.calls // args.rounds, 1)
    rows = []
    with _Remote() as stub:
        for name, fn in scenarios(stub).items():
            base: list[float] = []
            inst: list[float] = []
            _time(fn, 20)  # warm up connections and caches
            for _ in range(args.rounds):
                base += _time(fn, per_block)
                for i in ours:
                    i.instrument(tracer_provider=provider)
                _time(fn, 3)
                inst += _time(fn, per_block)
                for i in ours:
                    i.uninstrument()
            b, m = statistics.median(base), statistics.median(inst)
            rows.append((name, b * 1e3, m * 1e3, (m - b) * 1e6, (m - b) / b * 100))
    provider.shutdown()
    print(f"Machine: {platform.machine()}, {platform.processor() or 'unknown cpu'}, "
          f"Python {platform.python_version()}; openai {version('openai')}, anthropic "
          f"{version('anthropic')}, opentelemetry-sdk {version('opentelemetry-sdk')}, "
          f"opentelemetry-util-genai {version('opentelemetry-util-genai')}; "
          f"{per_block * args.rounds} calls per scenario and mode.\n")
    print("| scenario | uninstrumented median (ms) | instrumented median (ms) "
          "| added (µs) | added (%) |")
    print("|---|---:|---:|---:|---:|")
    for name, b, m, added, pct in rows:
        print(f"| {name} | {b:.3f} | {m:.3f} | {added:.0f} | {pct:.1f} |")


if __name__ == "__main__":
    main()
