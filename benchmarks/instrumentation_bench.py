"""Cost per instrumented LLM client call, ours against the peers, in the same rounds.

    python benchmarks/instrumentation_bench.py [--rounds 6] [--calls 150]
        [--configs NAME,...] [--scenarios NAME,...] [--json FILE] [--metrics]
        [--sampled-out] [--compare DIR] [--paired] [--no-transport]

Real ``openai`` and ``anthropic`` clients call the bundled loopback stub
(``otel_agent_context.instrumentation._stub``), which runs in a process of its own pinned to
another core than the benchmark. Most scenarios send the same request every call (a system
prompt and a history of nine messages); the two "new turn" scenarios (since run AI) send
what an agent's next call sends: the last four exchanges again, the reply to the last
question and a new question, text no call sent before (what ours digests is then new
every call, where the peers' cost does not depend on it); the two "tools" scenarios (since
run AM) send the same request with two tool definitions, as an agent does (the chat one a
temperature too; the Anthropic SDK installed here takes no sampling parameter).
Configurations (each with the same SDK ``TracerProvider``: a ``SimpleSpanProcessor`` into
an ``InMemorySpanExporter``, so every span's cost, export included, lands on the calling
thread alike; content capture off everywhere):

- ``uninstrumented``: each process's baseline, below;
- ``official GenAI``: ``opentelemetry-instrumentation-genai-openai`` / ``-anthropic``;
- ``OpenInference``: ``openinference-instrumentation-openai`` / ``-anthropic``;
- ``OpenLLMetry``: Traceloop's ``opentelemetry-instrumentation-openai`` / ``-anthropic``;
- ``ours``: ``otel_agent_context.instrumentation.openai`` / ``.anthropic``;
- ``ours + official``: both, composed into one inference span (ours outermost);
- ``official + ours``: the same, the official instrumentor outermost;
- ``bare span``: one current ``CLIENT`` span with 8 GenAI attributes around ``create``, the
  least an instrumentation emitting the inference span can do.

Every configuration runs in a fresh subprocess of its own, once per round, the order of the
configurations rotating round by round: instrumentors patch the clients globally, some
cannot uninstrument cleanly, and their import-time work and caches would leak into the
next configuration if they shared a process. Within a process, every scenario is timed
uninstrumented (its own baseline) and instrumented, on the same clients, in four
alternating blocks (base, instrumented, instrumented, base, ...: a drift within the process
falls on both phases alike; runs A-E timed the baseline first and the instrumented phase
second, which charged every configuration with whatever grew in between: the bare span,
~25 us of work, measured +600 us there; ``--sequential`` keeps that method). Turning a
configuration off also puts back any client method its ``uninstrument()`` left wrapped
(OpenLLMetry's OpenAI instrumentor leaves all of them), and every block starts from the
request data as built (``_fresh_requests``: OpenLLMetry edits a Responses call's input
messages); a configuration whose calls still record after that is an error, not timed.
Until run AI such a configuration was timed one phase after the other against a "baseline"
that still ran its wrappers on the edited messages, which under-measured OpenLLMetry by
~100-150 us a call on chat and ~1.4 ms on Responses. Each phase warms up first, then
times call by call: wall time (``perf_counter_ns``)
and the CPU time of the calling thread (``thread_time_ns``). "Added"
is, per round, the instrumented median minus the same process's uninstrumented median
(which cancels what differs from process to process: memory layout, the machine's load at
that minute); the tables give the median of the rounds and their p25 and p75. With
``--paired`` each composed configuration's process also times the official instrumentors
alone (a third phase in the same rotating blocks), and a table gives composed ÷ official
per round from one process: the goal's ratio without comparing two processes, whose
uninstrumented calls alone differ by ~10% (memory layout, the machine's state); a round
whose official phase added nothing measurable (few calls, noise) has no ratio and is
counted as left out. With
``--no-transport`` (since run AU) the clients' ``create`` methods return the response the
stub gave each scenario (:func:`_replayed`): the uninstrumented call costs a few µs
instead of milliseconds of the client's and the loopback's work, whose noise on this kind
of machine was larger than an instrumentor's cost, and most paired ratios' p25-p75 span
±0.01-0.05 (a few ±0.1-0.3); streams are left out, and OpenInference's OpenAI
instrumentor (which wraps the client's ``request``) records nothing then. The
peers are the ``bench`` extra (``pip install -e '.[bench]'``); a peer not installed is
reported as missing, not timed. Results: stdout as Markdown (benchmarks/instrumentation.md
records runs), ``--json`` for the raw summary.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib
import importlib.util
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import openai
import pydantic
import wrapt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rounds import (  # noqa: E402 - shared with frameworks_bench.py
    _CORES,
    NO_CONTENT,
    _machine,
    _Remote,
    _time,
    _version,
    alternate_phases,
    phases_line,
    summarize,
    tables,
    time_phase,
)


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
ANTHROPIC_MESSAGES = copy.deepcopy(HISTORY[1:])  # dicts of their own (see _fresh_requests)
ANTHROPIC_SYSTEM = [{"type": "text", "text": HISTORY[0]["content"],
                     "cache_control": {"type": "ephemeral"}}]
#: the requests' data as built
_PRISTINE = copy.deepcopy((HISTORY, ANTHROPIC_MESSAGES, ANTHROPIC_SYSTEM))


def _fresh_requests() -> bool:
    """Put the requests' data back as built, in place (the scenarios read these lists);
    True when an instrumentor had changed it. OpenLLMetry's OpenAI instrumentor (0.62.4)
    adds ``"type": "message"`` to every input message of a Responses call, the
    application's own dicts, and the SDK then takes ~1.3 ms longer to prepare every later
    request that holds them, uninstrumented ones included: each block starts from the data
    as built, so no baseline pays for it (runs before AI did, in its process), and the
    Anthropic scenarios' messages are dicts of their own."""
    if (HISTORY, ANTHROPIC_MESSAGES, ANTHROPIC_SYSTEM) == _PRISTINE:
        return False
    history, messages, system = copy.deepcopy(_PRISTINE)
    HISTORY[:], ANTHROPIC_MESSAGES[:], ANTHROPIC_SYSTEM[:] = history, messages, system
    return True


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

    # an agent's call: its tool definitions sent with every call
    schema = {"type": "object", "properties": {"order_id": {"type": "string"},
                                               "amount": {"type": "number"}},
              "required": ["order_id"]}
    chat_tools = [{"type": "function", "function": {
                      "name": "lookup_order", "description": "Find an order by its id.",
                      "parameters": schema}},
                  {"type": "function", "function": {
                      "name": "refund", "description": "Refund an order.",
                      "parameters": schema}}]
    messages_tools = [{"name": t["function"]["name"],
                       "description": t["function"]["description"],
                       "input_schema": t["function"]["parameters"]} for t in chat_tools]

    def chat_with_tools() -> Any:
        return oa.chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                          tools=chat_tools, temperature=0.2,
                                          max_completion_tokens=300)

    def messages_with_tools() -> Any:
        return an.messages.create(model="claude-sonnet-4-6", max_tokens=300,
                                  tools=messages_tools, system=ANTHROPIC_SYSTEM,
                                  messages=ANTHROPIC_MESSAGES)

    # an agent's loop: the call after a tool ran, the history holding the model's function
    # call as the SDK gave it back (``response.choices[0].message``) and the tool's result
    from openai.types.chat import ChatCompletionMessage

    called = ChatCompletionMessage.model_validate({"role": "assistant", "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'}}]})
    result = {"role": "tool", "tool_call_id": "call_1",
              "content": '{"status": "shipped", "eta": "tomorrow"}'}

    def chat_agent_loop() -> Any:
        return oa.chat.completions.create(model="gpt-4o-mini",
                                          messages=[*HISTORY, called, result],
                                          tools=chat_tools, max_completion_tokens=300)

    # the same in Anthropic's form: the assistant's content as the SDK gave it back (a text
    # and a tool use block), the tool's result in a user message
    from anthropic.types import TextBlock, ToolUseBlock

    used = [TextBlock(type="text", text="Let me look it up."),
            ToolUseBlock(type="tool_use", id="toolu_1", name="lookup_order",
                         input={"order_id": "42"})]
    answered = [{"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": '{"status": "shipped", "eta": "tomorrow"}'}]

    def messages_agent_loop() -> Any:
        return an.messages.create(model="claude-sonnet-4-6", max_tokens=300,
                                  tools=messages_tools, system=ANTHROPIC_SYSTEM,
                                  messages=[*ANTHROPIC_MESSAGES,
                                            {"role": "assistant", "content": used},
                                            {"role": "user", "content": answered}])

    # the same on the Responses API: the response's output items given back as the SDK's
    # objects (the assistant's earlier answer, then the function call), the call's output
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

    r_tools = [{"type": "function", "name": t["function"]["name"],
                "description": t["function"]["description"],
                "parameters": t["function"]["parameters"]} for t in chat_tools]
    r_call = ResponseFunctionToolCall.model_validate({
        "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup_order",
        "arguments": '{"order_id": "42"}', "status": "completed"})
    r_out = {"type": "function_call_output", "call_id": "call_1",
             "output": '{"status": "shipped", "eta": "tomorrow"}'}
    r_msg = ResponseOutputMessage.model_validate({
        "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "It shipped.", "annotations": []}]})

    def responses_agent_loop() -> Any:
        return oa.responses.create(model="gpt-4o-mini", instructions=HISTORY[0]["content"],
                                   input=[*HISTORY[1:-1], r_msg, HISTORY[-1], r_call, r_out],
                                   tools=r_tools, max_output_tokens=300)

    # an agent's conversation: each call sends the last four exchanges again, the reply to
    # the last question and a new question (text no call sent before), as an agent does
    turn = itertools.count()
    recent = [dict(m) for m in HISTORY[1:-1]]

    def next_turn() -> list[dict[str, str]]:
        n = next(turn)
        question = {"role": "user", "content": f"Question {n} about my order? " * 8}
        sent = [*recent, question]
        recent[:] = [*recent[2:], question,
                     {"role": "assistant", "content": f"Answer {n} about the order. " * 12}]
        return sent

    def chat_turn() -> Any:
        return oa.chat.completions.create(model="gpt-4o-mini",
                                          messages=[HISTORY[0], *next_turn()],
                                          max_completion_tokens=300)

    def messages_turn() -> Any:
        return an.messages.create(model="claude-sonnet-4-6", max_tokens=300,
                                  system=ANTHROPIC_SYSTEM, messages=next_turn())

    return {"openai chat.completions": chat, "openai chat.completions stream": chat_stream,
            "openai chat.completions async": chat_async, "openai responses": responses,
            "anthropic messages": messages, "anthropic messages.stream": messages_stream,
            "openai chat.completions new turn": chat_turn,
            "anthropic messages new turn": messages_turn,
            "openai chat.completions tools": chat_with_tools,
            "anthropic messages tools": messages_with_tools,
            "openai chat.completions agent loop": chat_agent_loop,
            "anthropic messages agent loop": messages_agent_loop,
            "openai responses agent loop": responses_agent_loop}


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



def _openinference() -> list[Any]:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), AnthropicInstrumentor()]


def _openllmetry() -> list[Any]:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), AnthropicInstrumentor()]


def _ours() -> list[Any]:
    return [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]


#: configuration -> (instrumentors to turn on, in order: the last runs outermost)
CONFIGS: dict[str, Callable[[], list[Any]]] = {
    "uninstrumented": lambda: [],
    "official GenAI": _official,
    "OpenInference": _openinference,
    "OpenLLMetry": _openllmetry,
    "ours": _ours,
    "ours + official": lambda: _official() + _ours(),
    "official + ours": lambda: _ours() + _official(),
    "bare span": lambda: [_BareSpan()],
}
#: the distributions each configuration needs (beyond the package and its test extra)
PACKAGES: dict[str, tuple[str, ...]] = {
    "official GenAI": ("opentelemetry-instrumentation-genai-openai",
                       "opentelemetry-instrumentation-genai-anthropic"),
    "OpenInference": ("openinference-instrumentation-openai",
                      "openinference-instrumentation-anthropic"),
    "OpenLLMetry": ("opentelemetry-instrumentation-openai",
                    "opentelemetry-instrumentation-anthropic"),
    "ours + official": ("opentelemetry-instrumentation-genai-openai",
                        "opentelemetry-instrumentation-genai-anthropic"),
    "official + ours": ("opentelemetry-instrumentation-genai-openai",
                        "opentelemetry-instrumentation-genai-anthropic"),
}
COMPARED = "compared checkout"
#: ours with the official instrumentors, either outermost
COMPOSED = ("ours + official", "official + ours")


def missing(config: str) -> list[str]:
    return [d for d in PACKAGES.get(config, ()) if _version(d) is None]


# -- one configuration, in its own process -------------------------------------------------


#: the client methods a scenario's call goes through, replaced under ``--no-transport``
#: (module, class, is_async)
_REPLAYED = (("openai.resources.chat.completions", "Completions", False),
             ("openai.resources.chat.completions", "AsyncCompletions", True),
             ("openai.resources.responses", "Responses", False),
             ("anthropic.resources.messages", "Messages", False))


def _replayed(wanted: dict[str, Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
    """``--no-transport``: the scenarios whose call returns the client's response model
    (not the streams), each run twice through the stub, after which the clients' ``create``
    methods return a copy of the response the stub gave that scenario (an id of its own
    each call) without building, sending or parsing anything. Every instrumentor that wraps
    these methods (installed before any instruments, so they wrap the replacement) sees the
    same arguments and the same response and does all of its own work; what the client and
    the loopback add (~2-4 ms a call here, whose noise is larger than an instrumentor's
    cost) is gone. One wrapping something else (OpenInference's OpenAI instrumentor wraps
    the client's ``request``) records nothing and is no peer in the goals."""
    recorded = {}
    for name, fn in wanted.items():
        fn()  # the second call's response: the stub's caches warm, as in a steady state
        result = fn()
        if isinstance(result, pydantic.BaseModel):
            recorded[name] = result
    current: list[Any] = [None]
    served = itertools.count()

    def response() -> Any:
        # a copy with an id of its own each call, as the API gives: an instrumentor that
        # keys its state by the response's id (OpenLLMetry's Responses one) records each
        recorded_response = current[0]
        return recorded_response.model_copy(
            update={"id": f"{recorded_response.id}-{next(served)}"})

    def replay(self: Any, *args: Any, **kwargs: Any) -> Any:
        return response()

    async def replay_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        return response()

    for module, cls, is_async in _REPLAYED:
        owner = getattr(importlib.import_module(module), cls)
        owner.create = replay_async if is_async else replay

    def bind(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        response = recorded[name]

        def call() -> Any:
            current[0] = response
            return fn()
        return call

    return {name: bind(name, fn) for name, fn in wanted.items() if name in recorded}


def run_child(config: str, url: str, calls: int, warmup: int, names: Sequence[str],
              metrics: bool, sampled_out: bool, compare: str | None,
              alternate: bool = True, paired: bool = False,
              no_transport: bool = False) -> dict[str, Any]:
    """Time every scenario uninstrumented and under one configuration, in alternating
    blocks (or one after the other with ``alternate=False``): per call
    wall and CPU nanoseconds of each phase, and spans a call. ``paired``: a composed
    configuration also times the official instrumentors alone (phase ``official``) in the
    same blocks. ``no_transport``: see :func:`_replayed`."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF if sampled_out else None)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings: dict[str, Any] = {"tracer_provider": provider}
    meters = None
    if metrics:
        meters = MeterProvider(metric_readers=[
            PeriodicExportingMetricReader(_DropMetrics(), export_interval_millis=60_000)])
        settings["meter_provider"] = meters
    instrumentors = _load_copy(compare) if config == COMPARED and compare else \
        CONFIGS[config]()
    stub = SimpleNamespace(openai_base_url=f"{url}/v1", anthropic_base_url=url)
    wanted = {name: fn for name, fn in scenarios(stub).items() if name in names}
    if no_transport:
        wanted = _replayed(wanted)
    out: dict[str, Any] = {name: {} for name in wanted}
    on, off = _switches(instrumentors, settings)
    also = None
    if paired and config in COMPOSED:  # the official ones of the same instances alone
        also = {"official": _switches([i for i in instrumentors if not isinstance(
            i, (OpenAIContextInstrumentor, AnthropicContextInstrumentor))], settings)}
    changed = False

    def build() -> dict[str, Callable[[], Any]]:
        nonlocal changed
        changed = _fresh_requests() or changed
        return wanted

    if not alternate:  # --sequential: uninstrumented first, then instrumented
        for phase in ("base", "instrumented"):
            if phase == "instrumented":
                on()
            for name, fn in build().items():
                time_phase(fn, warmup, calls, exporter, out[name], phase)
        off()
        for name in wanted:
            out[name]["alternated"] = False
    elif not alternate_phases(on, off, build, exporter, out, calls, warmup, also):
        # calls still record after off(), even with the wrappers put back: no clean
        # baseline is left in this process (a "base" timed now would be instrumented)
        raise SystemExit(f"configuration {config!r}: calls still record spans after "
                         "uninstrument() and its wrappers are removed; not timed")
    changed = _fresh_requests() or changed
    for name in wanted:
        out[name]["request_changed"] = changed
    provider.shutdown()
    if meters is not None:
        meters.shutdown()
    return out


#: what wrapt's wrappers derive from (wrapt 2: BaseObjectProxy; 1.x: ObjectProxy)
_PROXY = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def _client_proxies() -> dict[tuple[Any, str], Any]:
    """Every wrapt wrapper on a class of the loaded ``openai`` and ``anthropic`` modules, by
    (class, attribute)."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in ("openai", "anthropic"):
            continue
        for owner in list(vars(module).values()):
            if isinstance(owner, type) and owner.__module__ == module_name:
                for name, value in list(vars(owner).items()):
                    if isinstance(value, _PROXY):
                        found[owner, name] = value
    return found


def _switches(instrumentors: list[Any], settings: dict[str, Any]
              ) -> tuple[Callable[[], None], Callable[[], None]]:
    """Turning ``instrumentors`` on (in order: the last outermost) and off. Off also puts
    back any client method that ``uninstrument()`` left wrapped (OpenLLMetry's OpenAI
    instrumentor 0.62 unwraps none of its OpenAI methods: timed against such a "baseline",
    its own wrappers still running, it measured 31-63 µs a call for async chat where the
    alternating blocks measure ~160): each wrapped attribute gets back the very object it
    held before (a wrapper that was there already: ``unwrap`` may put back an equal copy)
    or, if it held none, the function under the wrappers."""
    before = _client_proxies()

    def on() -> None:
        for inst in instrumentors:
            inst.instrument(**settings)

    def off() -> None:
        for inst in instrumentors:
            inst.uninstrument()
        for (owner, name), value in _client_proxies().items():
            if (owner, name) in before:
                if value is not before[owner, name]:
                    setattr(owner, name, before[owner, name])
                continue
            while isinstance(value, _PROXY):
                value = value.__wrapped__
            setattr(owner, name, value)

    return on, off


def _spawn(config: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", config, "--stub-url", url,
           "--calls", str(args.calls), "--warmup", str(args.warmup),
           "--scenarios", ",".join(args.scenario_names)]
    if args.metrics:
        cmd.append("--metrics")
    if args.sampled_out:
        cmd.append("--sampled-out")
    if args.sequential:
        cmd.append("--sequential")
    if args.compare:
        cmd += ["--compare", args.compare]
    if args.paired:
        cmd.append("--paired")
    if args.no_transport:
        cmd.append("--no-transport")
    env = {**os.environ, **NO_CONTENT}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"configuration {config!r} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the summary -------------------------------------------------------------------------


def report(summary: dict[str, dict[str, dict[str, Any]]], configs: list[str]) -> str:
    others = [c for c in configs if c != "uninstrumented"]
    lines = tables(summary, others)
    lines += goals(summary)
    return "\n".join(lines)


def _added(by_config: dict[str, dict[str, Any]], config: str) -> float | None:
    entry = by_config.get(config)
    return entry["cpu_added"][1] if entry else None


def goals(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The issue's goals on added caller CPU (medians): ours at most the best of
    OpenInference and OpenLLMetry; ours at most 1.5x the official alone; ours + official at
    most 1.5x the official alone."""
    lines = ["### Goals (added caller CPU, medians)", "",
             "| scenario | ours µs | best peer µs | ours ÷ best peer (≤ 1) | official µs "
             "| ours ÷ official (≤ 1.5) | ours + official ÷ official (≤ 1.5) "
             "| official + ours ÷ official (≤ 1.5) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for scenario, by_config in summary.items():
        ours, official, both, both_inner = (
            _added(by_config, c)
            for c in ("ours", "official GenAI", "ours + official", "official + ours"))
        # a peer that recorded less than a span a call timed something else (under
        # --no-transport: OpenInference's OpenAI instrumentor, which wraps the client's
        # request): no peer for the goal
        peers = {c: a for c in ("OpenInference", "OpenLLMetry")
                 if (a := _added(by_config, c)) is not None
                 and by_config[c].get("spans_per_call", 1.0) >= 1.0}
        best = min(peers.items(), key=lambda kv: kv[1]) if peers else None

        def ratio(a: float | None, b: float | None, goal: float) -> str:
            if a is None or b is None or b <= 0:
                return "–"
            r = a / b
            return f"{r:.2f} {'met' if r <= goal else 'MISSED'}"

        lines.append(
            f"| {scenario} | " + (f"{ours:.0f}" if ours is not None else "–") + " | "
            + (f"{best[1]:.0f} ({best[0]})" if best else "–") + " | "
            + ratio(ours, best[1] if best else None, 1.0) + " | "
            + (f"{official:.0f}" if official is not None else "–") + " | "
            + ratio(ours, official, 1.5) + " | " + ratio(both, official, 1.5) + " | "
            + ratio(both_inner, official, 1.5) + " |")
    lines.append("")
    return lines + paired(summary)


def paired(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """With ``--paired``: each composed configuration's added caller CPU over the official
    instrumentors' alone, both timed in the same process and blocks, a ratio per round:
    the median and p25-p75 over rounds, against the goal of 1.5."""
    rows = []
    for scenario, by_config in summary.items():
        cells = []
        for config in COMPOSED:
            entry = by_config.get(config, {})
            q = entry.get("cpu_ratio_to_official")
            left_out = entry.get("cpu_ratio_to_official_left_out", 0)
            note = (f" ({left_out} round{'s' if left_out > 1 else ''} left out: the "
                    "official's added CPU ≤ 0)" if left_out else "")
            cells.append(("–" if q is None else
                          f"{q[1]:.2f} ({q[0]:.2f}–{q[2]:.2f}) "
                          f"{'met' if q[1] <= 1.5 else 'MISSED'}") + note)
        if any(c != "–" for c in cells):
            rows.append(f"| {scenario} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["### Composed ÷ official alone in the same process (--paired): median "
            "(p25–p75 over rounds), goal ≤ 1.5", "",
            "| scenario | " + " | ".join(f"{c} ÷ official" for c in COMPOSED) + " |",
            "|---|---:|---:|", *rows, ""]


VERSIONED = ("openai", "anthropic", "opentelemetry-sdk", "opentelemetry-util-genai",
             "opentelemetry-instrumentation-genai-openai",
             "opentelemetry-instrumentation-genai-anthropic",
             "openinference-instrumentation-openai", "openinference-instrumentation-anthropic",
             "opentelemetry-instrumentation-openai", "opentelemetry-instrumentation-anthropic",
             "wrapt", "otel-agent-context")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds; each runs every configuration once, in its own process")
    parser.add_argument("--calls", type=int, default=150,
                        help="timed calls per scenario, configuration and round")
    parser.add_argument("--warmup", type=int, default=30,
                        help="untimed calls per scenario before the timed ones, per process")
    parser.add_argument("--configs", help="comma-separated subset of: " + ", ".join(CONFIGS))
    parser.add_argument("--scenarios", help="comma-separated subset of the scenarios")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    parser.add_argument("--metrics", action="store_true",
                        help="also an SDK MeterProvider, as opentelemetry-instrument sets up")
    parser.add_argument("--sampled-out", action="store_true",
                        help="a sampler that records nothing (ALWAYS_OFF)")
    parser.add_argument("--compare", metavar="DIR",
                        help="also time the instrumentors of another checkout (DIR holds its "
                             "otel_agent_context package, e.g. a git worktree of the last "
                             "commit), as one more configuration")
    parser.add_argument("--sequential", action="store_true",
                        help="time each process's uninstrumented phase first, then the "
                             "instrumented one (the method of runs A-E), instead of in "
                             "alternating blocks")
    parser.add_argument("--paired", action="store_true",
                        help="the composed configurations also time the official "
                             "instrumentors alone in the same process and blocks: the "
                             "composed ÷ official ratio per round from one process")
    parser.add_argument("--no-transport", action="store_true",
                        help="the clients' create methods return the response the stub gave "
                             "each scenario: the instrumentors' own work timed without the "
                             "client's and the loopback's (streams left out; OpenInference's "
                             "OpenAI instrumentor, which wraps the client's request, records "
                             "nothing then)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--stub-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    all_scenarios = list(scenarios(SimpleNamespace(openai_base_url="http://127.0.0.1:9/v1",
                                                   anthropic_base_url="http://127.0.0.1:9")))
    args.scenario_names = args.scenarios.split(",") if args.scenarios else all_scenarios
    if args.child:
        result = run_child(args.child, args.stub_url, args.calls, args.warmup,
                           args.scenario_names, args.metrics, args.sampled_out, args.compare,
                           alternate=not args.sequential, paired=args.paired,
                           no_transport=args.no_transport)
        print(json.dumps(result))
        return
    unknown = set(args.scenario_names) - set(all_scenarios)
    if unknown:
        raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {all_scenarios}")
    wanted = args.configs.split(",") if args.configs else list(CONFIGS)
    wanted = [c for c in wanted if c != "uninstrumented"]  # every process's baseline
    if args.compare:
        wanted.append(COMPARED)
    absent = {c: missing(c) for c in wanted if missing(c)}
    configs = [c for c in wanted if c not in absent]
    os.sched_setaffinity(0, _CORES[:1])  # the children inherit the benchmark's core
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in args.scenario_names}
    started = time.monotonic()
    with _Remote() as stub:
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            this_round = {config: _spawn(config, stub.url, args) for config in order}
            for scenario in args.scenario_names:
                if all(scenario in this_round[c] for c in order):  # --no-transport: no streams
                    rounds[scenario].append({c: this_round[c][scenario] for c in order})
    left_out = [s for s, per_round in rounds.items() if not per_round]
    rounds = {s: per_round for s, per_round in rounds.items() if per_round}
    summary = summarize(rounds)
    versions = {d: _version(d) for d in VERSIONED}
    print(f"Machine: {_machine()}; Python {platform.python_version()}.")
    print("Versions: " + ", ".join(f"{d} {v}" for d, v in versions.items() if v) + ".")
    print(f"{args.rounds} rounds x {args.calls} calls per scenario and configuration "
          f"({args.warmup} warm-up calls per process), "
          f"{'traces and metrics' if args.metrics else 'traces'}"
          f"{', sampled out (ALWAYS_OFF)' if args.sampled_out else ''}, content capture off; "
          f"{time.monotonic() - started:.0f} s.")
    for config, dists in absent.items():
        print(f"Not installed, not timed: {config} ({', '.join(dists)}; "
              "pip install -e '.[bench]').")
    if args.no_transport:
        print("No transport (--no-transport): each client's create returns a copy of the "
              "response the stub gave its scenario (an id of its own each call); the added "
              "time is the instrumentors' own work"
              + (f"; left out (their calls return no response model): "
                 f"{', '.join(left_out)}" if left_out else "") + ".")
    print(phases_line(rounds, args.sequential)
          + (" With --paired the composed processes rotate three phases (uninstrumented, "
             "composed, the official alone: ABC, BCA, CAB, ...)." if args.paired else ""))
    changers = sorted({c for per_round in rounds.values() for r in per_round
                       for c, t in r.items() if t.get("request_changed")})
    if changers:
        print("Changed the application's request data (put back before every block, so "
              "no baseline ran with it): " + ", ".join(changers) + ".")
    print()
    print(report(summary, ["uninstrumented", *configs]))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": _machine(), "python": platform.python_version(), "versions": versions,
             "rounds": args.rounds, "calls": args.calls, "missing": absent,
             "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
