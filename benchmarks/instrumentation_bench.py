"""Added latency per instrumented LLM client call, against the same call uninstrumented.

    python benchmarks/instrumentation_bench.py [--calls 400] [--rounds 5] [--metrics]
        [--compare DIR]

Real ``openai`` and ``anthropic`` clients call the bundled loopback stub
(``otel_agent_context.instrumentation._stub``), run in a process of its own on another core
than the benchmark. Each scenario is timed in rounds that alternate the modes in blocks (so
drift of the machine hits all alike); the reported numbers are medians over all calls.
``--compare DIR`` adds a mode to every round: the instrumentors of another checkout
(``git worktree add /tmp/before HEAD~1``), loaded under another package name, for a
before/after measured in the same minutes.
"Instrumented" is our instrumentor alone with the OpenTelemetry SDK (a
``BatchSpanProcessor`` with an exporter that drops the spans, so the export cost, which
happens off the call path, is not counted) and content capture off; ``--metrics`` adds the
SDK ``MeterProvider`` that ``opentelemetry-instrument`` also configures (a periodic reader
whose exporter drops the points), so the per-call metric recording is counted too.

Two reference modes run in the same rounds, to say what any instrumentation of these calls
costs on this stub: the official OpenTelemetry GenAI instrumentors
(``opentelemetry-instrumentation-genai-openai`` / ``-anthropic``: one inference span, no
context stages), and ``bare span``: one ``CLIENT`` span with the GenAI request and response
attributes, made current around ``create`` and nothing else (for a stream it ends when
``create`` returns, and ``messages.stream`` is not wrapped), the least an instrumentation that
emits the inference span the conventions require can do. ``both`` is ours composed with the
official instrumentors (one inference span carrying ``gen_ai.*`` and ``context.*``).

Besides wall time (``perf_counter_ns``) each call's CPU time on the calling thread
(``thread_time_ns``) is recorded: on a shared machine the wall time swings with the load,
while the CPU the instrumentation adds to the caller's thread does much less. Results go to
stdout as a Markdown table (benchmarks/instrumentation.md records runs).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
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
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class _DropMetrics(MetricExporter):
    def export(self, metrics_data: Any, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


HISTORY = [{"role": "system", "content": "You are ACME's support agent. " * 20}]
for i in range(4):
    HISTORY.append({"role": "user", "content": f"Question {i} about my order? " * 8})
    HISTORY.append({"role": "assistant", "content": f"Answer {i} about the order. " * 12})
HISTORY.append({"role": "user", "content": "And when will it arrive?"})
ANTHROPIC_MESSAGES = HISTORY[1:]
ANTHROPIC_SYSTEM = [{"type": "text", "text": HISTORY[0]["content"],
                     "cache_control": {"type": "ephemeral"}}]


#: the benchmark runs on the first allowed core, the stub on the others: the two never
#: compete for a core, which on a 2-core machine is most of the run-to-run scatter
_CORES = sorted(os.sched_getaffinity(0))


class _Remote:
    """The stub in its own process, so its serving thread does not share our GIL."""

    def __init__(self) -> None:
        pin = _CORES[1:] if len(_CORES) > 1 else None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context.instrumentation._stub"],
            stdout=subprocess.PIPE, text=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.openai_base_url = f"{self.url}/v1"
        self.anthropic_base_url = self.url

    def __enter__(self) -> _Remote:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class _BareSpan:
    """The floor: one current CLIENT span per ``create`` with the GenAI attributes."""

    TARGETS = (("openai.resources.chat.completions", "Completions.create", "openai"),
               ("openai.resources.chat.completions", "AsyncCompletions.create", "openai"),
               ("openai.resources.responses", "Responses.create", "openai"),
               ("anthropic.resources.messages", "Messages.create", "anthropic"))

    def __init__(self) -> None:
        self.done: list[tuple[Any, str]] = []

    def instrument(self, **settings: Any) -> None:
        from opentelemetry.trace import SpanKind, use_span
        from wrapt import wrap_function_wrapper

        tracer = settings["tracer_provider"].get_tracer("bench.bare_span")

        def start(provider: str, kwargs: dict[str, Any]) -> Any:
            model = kwargs.get("model")
            return tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                "gen_ai.request.model": model, "server.address": "127.0.0.1"})

        def finish(span: Any, result: Any) -> None:
            usage = getattr(result, "usage", None)
            if usage is not None:
                span.set_attributes({
                    "gen_ai.response.id": result.id, "gen_ai.response.model": result.model,
                    "gen_ai.usage.input_tokens": getattr(usage, "input_tokens", None)
                    or getattr(usage, "prompt_tokens", 0),
                    "gen_ai.usage.output_tokens": getattr(usage, "output_tokens", None)
                    or getattr(usage, "completion_tokens", 0)})
            span.end()

        def sync(provider: str) -> Callable[..., Any]:
            def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                span = start(provider, kwargs)
                with use_span(span, end_on_exit=False):
                    result = wrapped(*args, **kwargs)
                finish(span, result)
                return result
            return wrapper

        def async_(provider: str) -> Callable[..., Any]:
            async def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                span = start(provider, kwargs)
                with use_span(span, end_on_exit=False):
                    result = await wrapped(*args, **kwargs)
                finish(span, result)
                return result
            return wrapper

        for module, name, provider in self.TARGETS:
            wrap_function_wrapper(module, name, (async_ if "Async" in name else sync)(provider))
            cls = getattr(importlib.import_module(module), name.split(".")[0])
            self.done.append((cls, name.split(".")[1]))

    def uninstrument(self) -> None:
        from opentelemetry.instrumentation.utils import unwrap

        for cls, method in self.done:
            unwrap(cls, method)
        self.done.clear()


def _official() -> list[Any]:
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), AnthropicInstrumentor()]


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


def _time(fn: Callable[[], Any], n: int) -> tuple[list[int], list[int]]:
    """Wall and calling-thread CPU nanoseconds of ``n`` calls."""
    wall, cpu = [], []
    clock, thread_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(n):
        w, c = clock(), thread_clock()
        fn()
        c2, w2 = thread_clock(), clock()
        wall.append(w2 - w)
        cpu.append(c2 - c)
    return wall, cpu


def time_modes(fn: Callable[[], Any], modes: dict[str, list[Any]], settings: dict[str, Any],
               rounds: int, per_block: int) -> dict[str, tuple[list[int], list[int]]]:
    """Wall and CPU nanoseconds of ``fn`` per mode (a list of instrumentors to turn on):
    each mode warmed up, then one block a round, the order rotating so none always follows
    another."""
    names = list(modes)
    times: dict[str, tuple[list[int], list[int]]] = {n: ([], []) for n in names}
    for name in names:  # warm up connections, caches and first-call costs
        for i in modes[name]:
            i.instrument(**settings)
        _time(fn, 20)
        for i in modes[name]:
            i.uninstrument()
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(k + r) % len(names)]
            for i in modes[name]:
                i.instrument(**settings)
            _time(fn, 3)
            for total, part in zip(times[name], _time(fn, per_block), strict=True):
                total += part
            for i in modes[name]:
                i.uninstrument()
    return times


def _load_copy(path: str) -> list[Any]:
    """The instrumentors of another checkout's ``otel_agent_context`` (``path`` holds the
    package directory), imported under another name so both run in this process."""
    name = "otel_agent_context_compared"
    package = os.path.join(path, "otel_agent_context")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(package, "__init__.py"), submodule_search_locations=[package])
    if spec is None or spec.loader is None:
        raise SystemExit(f"no otel_agent_context package under {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    oa = importlib.import_module(f"{name}.instrumentation.openai")
    an = importlib.import_module(f"{name}.instrumentation.anthropic")
    return [oa.OpenAIContextInstrumentor(), an.AnthropicContextInstrumentor()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per scenario and mode")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks")
    parser.add_argument("--metrics", action="store_true",
                        help="also an SDK MeterProvider, as opentelemetry-instrument sets up")
    parser.add_argument("--sampled-out", action="store_true",
                        help="a sampler that records nothing (ALWAYS_OFF): the cost of a call "
                             "whose trace is not sampled")
    parser.add_argument("--compare", metavar="DIR",
                        help="also time the instrumentors of another checkout (DIR holds its "
                             "otel_agent_context package, e.g. a git worktree of the last "
                             "commit), in the same rounds")
    args = parser.parse_args(argv)
    os.sched_setaffinity(0, _CORES[:1])
    provider = TracerProvider(sampler=ALWAYS_OFF if args.sampled_out else None)
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    settings: dict[str, Any] = {"tracer_provider": provider}
    meters = None
    if args.metrics:
        meters = MeterProvider(metric_readers=[
            PeriodicExportingMetricReader(_DropMetrics(), export_interval_millis=60_000)])
        settings["meter_provider"] = meters
    ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    modes: dict[str, list[Any]] = {
        "uninstrumented": [],
        "otel-agent-context": ours,
        "official GenAI": _official(),
        "both": _official() + ours,  # composed: one inference span
        "bare span": [_BareSpan()],
    }
    if args.compare:
        modes["compared checkout"] = _load_copy(args.compare)
    names = list(modes)
    per_block = max(args.calls // args.rounds, 1)
    rows = []
    med = statistics.median
    with _Remote() as stub:
        for scenario, fn in scenarios(stub).items():
            times = time_modes(fn, modes, settings, args.rounds, per_block)
            wall = {n: med(t[0]) / 1e3 for n, t in times.items()}  # µs
            cpu = {n: med(t[1]) / 1e3 for n, t in times.items()}
            rows.append((scenario, wall, cpu))
    provider.shutdown()
    if meters is not None:
        meters.shutdown()
    print(f"Machine: {platform.machine()}, {platform.processor() or 'unknown cpu'}, "
          f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}; "
          f"Python {platform.python_version()}; openai {version('openai')}, anthropic "
          f"{version('anthropic')}, opentelemetry-sdk {version('opentelemetry-sdk')}, "
          f"opentelemetry-util-genai {version('opentelemetry-util-genai')}; "
          f"{'traces and metrics' if args.metrics else 'traces'}"
          f"{', sampled out (ALWAYS_OFF)' if args.sampled_out else ''}; "
          f"{per_block * args.rounds} calls per scenario and mode.\n")
    others = names[1:]
    print("| scenario | uninstrumented (ms) | "
          + " | ".join(f"{n}: added µs (%)" for n in others)
          + " | caller CPU added (µs): " + " / ".join(others) + " |")
    print("|---|---:|" + "---:|" * len(others) + "---:|")
    for scenario, wall, cpu in rows:
        b, cb = wall["uninstrumented"], cpu["uninstrumented"]
        cells = [f"{wall[n] - b:.0f} ({(wall[n] - b) / b * 100:.1f}%)" for n in others]
        print(f"| {scenario} | {b / 1e3:.3f} | " + " | ".join(cells) + " | "
              + " / ".join(f"{cpu[n] - cb:.0f}" for n in others) + " |")


if __name__ == "__main__":
    main()
