"""Probe: instructions (callgrind) of each part of one call composed with another util-genai
instrumentor (the official GenAI one's role), in both orders and the other alone, in one
process, no network: where the two orders' costs differ. Issue 11.

    python benchmarks/probes/composed_orders.py [--calls 20] [--api openai|anthropic]

The parts of a call run in order; one part is counted at a time (counting turned on and off
around it, ``callgrind_control``, each call), its dump named by order and part:

- ``alone``: the other's inference started (``start``), finished with six fields (``finish``);
- ``inner`` (the other outermost): its start, our ``Call`` started inside it
  (``LightSuppressed``, ``ours_start``), our ``Call`` completed on a parsed response
  (``ours_end``), the other's finish merging what ours published (``finish``);
- ``outer`` (ours outermost): our ``Call`` started publishing an ``InferenceData``
  (``LightInference``, ``ours_start``), the other's suppressed invocation, started and
  finished (``other``), our ``Call`` completed (``ours_end``: the merge, the span's end).

``nothing`` is what turning counting on and off costs; it is taken off every part. Results:
``benchmarks/instrumentation.md``.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _callgrind as callgrind  # noqa: E402


def _control(*flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True,
                   capture_output=True)


def _child(calls: int, which: str) -> None:
    import instrumentation_bench as bench
    from anthropic.types import Message
    from openai.types.chat import ChatCompletion
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util.genai.handler import TelemetryHandler

    from otel_agent_context.instrumentation import _common as C
    from otel_agent_context.instrumentation.anthropic import _extract as X
    from otel_agent_context.instrumentation.openai import _extract as OX

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tel = C.ClientTelemetry("probe", tracer_provider=provider)
    other = TelemetryHandler(tracer_provider=provider, instrumentation_scope_name="other")
    if which == "openai":
        # as the instrumentor builds it (a tree before ``Api.settles``: without it)
        api = C.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator, OX.chat_is_stream,
                    OX.PROVIDER, *(("messages",) if "settles" in C.Api.__dataclass_fields__
                                   else ()))
        model = "gpt-4o-mini"
        msg: Any = ChatCompletion.model_validate({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "system_fingerprint": "fp_1",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "The order shipped yesterday."}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912}})
        given: dict[str, Any] = {"model": model, "messages": bench.HISTORY,
                                 "max_completion_tokens": 300}
    else:
        api = C.Api(X.messages_request, X.messages_response, X.MessagesAccumulator,
                    X.messages_is_stream, X.PROVIDER)
        model = "claude-sonnet-4-6"
        msg = Message.model_validate({
            "id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "The order shipped yesterday."}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 900, "output_tokens": 12}})
        given = {"model": model, "max_tokens": 300, "system": bench.ANTHROPIC_SYSTEM,
                 "messages": bench.ANTHROPIC_MESSAGES}
    where: dict[str, Any] = {"request_model": model, "server_address": "127.0.0.1",
                             "server_port": 8000}

    def finish(inv: Any) -> None:  # what the official instrumentor sets from a response
        inv.max_tokens = 300
        inv.response_id = "r1"
        inv.response_model_name = model
        inv.finish_reasons = ["stop"]
        inv.input_tokens = 900
        inv.output_tokens = 12
        inv.stop()

    def run(parts: list[Callable[[dict[str, Any]], Any]], counted: int) -> None:
        state: dict[str, Any] = {}
        for i, part in enumerate(parts):
            if i == counted:
                _control("-i", "on")
            part(state)
            if i == counted:
                _control("-i", "off")

    def other_start(s: dict[str, Any]) -> None:
        s["other"] = other.inference(api.provider, operation_name="chat", **where)

    orders: dict[str, list[tuple[str, Callable[[dict[str, Any]], Any]]]] = {
        "alone": [("start", other_start), ("finish", lambda s: finish(s["other"]))],
        "inner": [
            ("start", other_start),
            ("ours_start", lambda s: s.update(call=tel.start(
                api, (), dict(given), "127.0.0.1", 8000, True))),
            ("ours_end", lambda s: C._complete(s["call"], api, msg)),
            ("finish", lambda s: finish(s["other"]))],
        "outer": [
            ("ours_start", lambda s: s.update(call=tel.start(
                api, (), dict(given), "127.0.0.1", 8000, True, True))),
            ("other", lambda s: finish(other.inference(api.provider, operation_name="chat",
                                                       **where))),
            ("ours_end", lambda s: C._complete(s["call"], api, msg))],
    }

    def count(label: str, fn: Callable[[], None]) -> None:
        for _ in range(5):
            fn()
        exporter.clear()
        gc.collect()
        gc.disable()
        try:
            _control("-z")
            for _ in range(calls):
                fn()
        finally:
            gc.enable()
        _control(f"--dump={label}")
        exporter.clear()

    def nothing() -> None:
        _control("-i", "on")
        _control("-i", "off")

    count("nothing", nothing)
    for order, parts in orders.items():
        fns = [p for _, p in parts]
        for i, (name, _) in enumerate(parts):
            def one(fns: list[Callable[[dict[str, Any]], Any]] = fns, i: int = i) -> None:
                run(fns, i)

            count(f"{order}.{name}", one)


#: the dumps in the order printed
_ORDER = ("alone.start", "alone.finish", "inner.start", "inner.ours_start", "inner.ours_end",
          "inner.finish", "outer.ours_start", "outer.other", "outer.ours_end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--api", choices=("anthropic", "openai"), default="openai")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.calls, args.api)
        return
    if not callgrind.available():
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    env = {**os.environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT"}
    counts = callgrind.run([sys.executable, __file__, "--child", "--calls", str(args.calls),
                            "--api", args.api], env, args.calls)
    base = counts.pop("nothing")
    totals: dict[str, float] = {}
    for label, value in sorted(counts.items(), key=lambda kv: _ORDER.index(kv[0])):
        order = label.split(".")[0]
        totals[order] = totals.get(order, 0.0) + value - base
        print(f"{label:18s} {(value - base) / 1e3:8,.0f}K instructions")
    for order, value in totals.items():
        print(f"{order + ' (all parts)':18s} {value / 1e3:8,.0f}K instructions")
    print(f"(counting on and off, taken off each part: {base / 1e3:,.0f}K)")


if __name__ == "__main__":
    main()
