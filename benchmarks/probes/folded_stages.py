"""Probe for a contract decision, not the contract: what an instrumented call would add if
its budget and assembly were attributes of the inference span (blocks and window segments as
arrays) instead of two stage spans and ~15 events.

    python benchmarks/probes/folded_stages.py [--rounds 30]

It reads the request with the instrumentors' own parsers and starts the inference span
through ``opentelemetry-util-genai`` as they do, then sets ~15 ``context.*`` attributes
(names made up for the probe) on that span. Non-streaming calls only. Same stub, pinning
and alternation as ``instrumentation_bench.py``, against ours, the official GenAI
instrumentors and a bare span in the same rounds. Results: ``benchmarks/instrumentation.md``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from wrapt import wrap_function_wrapper

import otel_agent_context.instrumentation.anthropic._extract as AX
import otel_agent_context.instrumentation.openai._extract as OX
from otel_agent_context._digest import assembly_hash, assembly_line
from otel_agent_context.instrumentation._common import ClientTelemetry, _materialize
from otel_agent_context.instrumentation._models import context_window

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import instrumentation_bench as B  # noqa: E402

_TARGETS = (
    ("openai.resources.chat.completions", "Completions.create", OX.chat_request,
     OX.chat_response),
    ("openai.resources.responses", "Responses.create", OX.responses_request,
     OX.responses_response),
    ("anthropic.resources.messages", "Messages.create", AX.messages_request,
     AX.messages_response),
)


class Folded:
    """The budget and the assembly as attributes of the inference span."""

    def __init__(self) -> None:
        self.done: list[tuple[Any, str]] = []

    def instrument(self, **settings: Any) -> None:
        tel = ClientTelemetry("folded_stages_probe", tracer_provider=settings["tracer_provider"])
        calls = [0]

        def make(parse_request: Any, parse_response: Any) -> Any:
            def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
                _materialize(kwargs)
                req = parse_request(args, kwargs, False)
                inv = tel.handler.inference(req.provider, request_model=req.model,
                                            server_address="127.0.0.1", server_port=1,
                                            operation_name=req.operation)
                for key, value in req.genai.items():
                    if value is not None:
                        setattr(inv, key, value)
                window = context_window(req.model)
                blocks = req.blocks
                used: dict[str, int] = {}
                for b in blocks:
                    used[b.segment] = used.get(b.segment, 0) + b.tokens
                calls[0] += 1
                inv.span.set_attributes({
                    "context.id": f"ctx_{calls[0]}", "context.scope": "turn",
                    "context.span_count": 0,
                    "context.budget.max_tokens": window or 0,
                    "context.budget.reserved_tokens": req.reserved_output or 0,
                    "context.budget.overflow_strategy": req.overflow_strategy,
                    "context.window.segments": tuple(used),
                    "context.window.used_tokens": tuple(used.values()),
                    "context.assembly.block.item_ids": tuple(b.item_id for b in blocks),
                    "context.assembly.block.kinds": tuple(b.kind for b in blocks),
                    "context.assembly.block.tokens": tuple(b.tokens for b in blocks),
                    "context.assembly.block.injection_points": tuple(b.point for b in blocks),
                    "context.assembly.block.digests": tuple(b.digest or "" for b in blocks),
                    "context.assembly.hash": assembly_hash(
                        [assembly_line(i, b.item_id, b.digest) for i, b in enumerate(blocks)]),
                })
                result = wrapped(*args, **kwargs)
                out = parse_response(result, False)
                inv.response_id = out.response_id
                inv.response_model_name = out.response_model
                inv.finish_reasons = out.finish_reasons
                inv.input_tokens = out.input_tokens
                inv.output_tokens = out.output_tokens
                if out.input_tokens is not None and window:
                    inv.span.set_attributes({
                        "context.budget.actual_tokens": out.input_tokens,
                        "context.budget.utilization": out.input_tokens / window,
                        "context.budget.overflow": False})
                inv.stop()
                return result
            return wrapper

        for module, name, parse_request, parse_response in _TARGETS:
            wrap_function_wrapper(module, name, make(parse_request, parse_response))
            cls_name, method = name.split(".")
            self.done.append((getattr(importlib.import_module(module), cls_name), method))

    def uninstrument(self) -> None:
        for cls, method in self.done:
            unwrap(cls, method)
        self.done.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="blocks of 30 calls a mode")
    args = parser.parse_args()
    os.sched_setaffinity(0, B._CORES[:1])
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(B._Drop()))
    modes: dict[str, list[Any]] = {
        "uninstrumented": [],
        "otel-agent-context": [B.OpenAIContextInstrumentor(), B.AnthropicContextInstrumentor()],
        "official GenAI": B._official(),
        "folded (probe)": [Folded()],
        "bare span": [B._BareSpan()],
    }
    names = list(modes)
    med = statistics.median
    print("| scenario | uninstrumented (ms) | "
          + " | ".join(f"{n}: added µs (%)" for n in names[1:]) + " |")
    print("|---|---:|" + "---:|" * (len(names) - 1))
    with B._Remote() as stub:
        scenarios = B.scenarios(stub)
        for scenario in ("openai chat.completions", "openai responses", "anthropic messages"):
            fn = scenarios[scenario]
            wall = {n: t[0] for n, t in B.time_modes(
                fn, modes, {"tracer_provider": provider}, args.rounds, 30).items()}
            base = med(wall["uninstrumented"])
            cells = [f"{(med(wall[n]) - base) / 1e3:.0f} "
                     f"({(med(wall[n]) - base) / base * 100:.1f}%)" for n in names[1:]]
            print(f"| {scenario} | {base / 1e6:.2f} | " + " | ".join(cells) + " |")
    provider.shutdown()


if __name__ == "__main__":
    main()
