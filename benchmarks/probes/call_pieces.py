"""Probe: instructions (callgrind) of the pieces of one auto-instrumented Anthropic call, in
process, no network: where a call's cost goes.

    python benchmarks/probes/call_pieces.py [--calls 20] [--api anthropic|openai] [--only PIECE,...]

Each piece runs ``--calls`` times after a warm-up, counted alone (``_callgrind.count``) on an
SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` into memory (as the benchmarks):
``whole`` (our ``Call`` from start to completion on a parsed response, the light inference
path), ``whole_util`` (the same through util-genai's invocation), ``light`` / ``util`` (an
inference invocation alone, six attributes set), ``ours_outer_*`` / ``ours_inner_*`` (two
instrumentors' invocations of a call merged into one span, as composed with the official
instrumentor: ours outermost, through util-genai or the light invocation publishing for the
other, suppressed, inside; or the other outermost and ours inside, util-genai's suppressed
invocation or ``LightSuppressed``), ``bare`` (an SDK span with the same
attributes), ``request`` / ``response`` (reading them), ``materialize``, ``segments``,
``fold`` (a span, the call envelope and ``fold_call``), ``fold_stop`` (and the usage, the
budget's and envelope's stops: a call's records with those objects), ``record`` (the same
records through ``CallRecord``, what a call outside any envelope does), ``envelope`` (a span
and the call envelope started and stopped); ``stream*`` an OpenAI chat stream of the benchmark's 15
chunks from a list (our ``Call`` and stream wrapper, the light path or ``_util``;
``stream_official`` the official instrumentor's wrapper alone, ``stream_ours_outer`` /
``stream_ours_inner`` the two composed, ours outermost or inside; ``stream_accumulate``
reading the chunks). ``--api openai``: the call pieces on the OpenAI chat benchmark
request (10 messages) and a parsed ``ChatCompletion``. Results: ``benchmarks/instrumentation.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _callgrind as callgrind  # noqa: E402


def _child(calls: int, which: str, only: list[str] | None) -> None:
    import instrumentation_bench as bench
    from anthropic.types import Message
    from openai.types.chat import ChatCompletion
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util.genai.handler import TelemetryHandler

    from otel_agent_context._folded import CallRecord, fold_call
    from otel_agent_context.instrumentation import _common as C
    from otel_agent_context.instrumentation._inference import (
        LightInference,
        LightSuppressed,
        light_mode,
    )
    from otel_agent_context.instrumentation.anthropic import _extract as X
    from otel_agent_context.instrumentation.openai import _extract as OX

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("probe")
    tel = C.ClientTelemetry("probe", tracer_provider=provider)
    api = C.Api(X.messages_request, X.messages_response, X.MessagesAccumulator,
                X.messages_is_stream, X.PROVIDER)
    msg: Any = Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "The order shipped yesterday."}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 12}})

    given: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 300,
                             "system": bench.ANTHROPIC_SYSTEM,
                             "messages": bench.ANTHROPIC_MESSAGES}
    parse_request, parse_response = X.messages_request, X.messages_response
    if which == "openai":
        # as the instrumentor builds it (a tree before ``Api.settles``: without it)
        api = C.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator, OX.chat_is_stream,
                    OX.PROVIDER, *(("messages",) if "settles" in C.Api.__dataclass_fields__
                                   else ()))
        msg = ChatCompletion.model_validate({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
            "model": "gpt-4o-mini", "system_fingerprint": "fp_1",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "The order shipped yesterday."}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912}})
        parse_request, parse_response = OX.chat_request, OX.chat_response
        given = {"model": "gpt-4o-mini", "messages": bench.HISTORY,
                 "max_completion_tokens": 300}

    def kwargs() -> dict[str, Any]:  # a new request dict each call, as an application's
        return dict(given)

    def whole(light: bool = True) -> None:
        call = tel.start(api, (), kwargs(), "127.0.0.1", 8000, light)
        C._complete(call, api, msg)

    def invocation(inv: Any) -> None:
        inv.max_tokens = 300
        inv.response_id = "msg_1"
        inv.response_model_name = "claude-sonnet-4-6"
        inv.finish_reasons = ["end_turn"]
        inv.input_tokens = 900
        inv.output_tokens = 12
        inv.stop()

    other = TelemetryHandler(tracer_provider=provider, instrumentation_scope_name="other")
    where = {"request_model": "claude-sonnet-4-6", "server_address": "127.0.0.1",
             "server_port": 8000}

    def composed(ours_outer: bool, light: bool) -> None:
        """Two instrumentors' invocations of one call, merged into one span: ours outer and
        the other (util-genai, suppressed) inside, or the other outer and ours inside."""
        if ours_outer:
            outer: Any = LightInference(tel.handler, "anthropic", context=None, publish=True,
                                        **where) if light else \
                tel.handler.inference("anthropic", operation_name="chat", **where)
            invocation(other.inference("anthropic", operation_name="chat", **where))
        else:
            outer = other.inference("anthropic", operation_name="chat", **where)
            data = light_mode(None)
            invocation(LightSuppressed(data, "anthropic", context=None, **where) if light
                       else tel.handler.inference("anthropic", operation_name="chat", **where))
        invocation(outer)

    def whole_composed(ours_outer: bool) -> None:
        """Our whole call composed with another util-genai invocation of it (the official
        instrumentor's, without its own reading of the request and response)."""
        if ours_outer:
            call = tel.start(api, (), kwargs(), "127.0.0.1", 8000, True, True)
            invocation(other.inference("openai" if which == "openai" else "anthropic",
                                       operation_name="chat", **where))
            C._complete(call, api, msg)
        else:
            outer = other.inference("openai" if which == "openai" else "anthropic",
                                    operation_name="chat", **where)
            call = tel.start(api, (), kwargs(), "127.0.0.1", 8000, True)
            C._complete(call, api, msg)
            invocation(outer)

    start = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
             "gen_ai.request.model": "claude-sonnet-4-6", "server.address": "127.0.0.1",
             "server.port": 8000}
    finish = {"gen_ai.request.max_tokens": 300, "gen_ai.response.finish_reasons": ["end_turn"],
              "gen_ai.response.model": "claude-sonnet-4-6", "gen_ai.response.id": "msg_1",
              "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 12}

    def bare() -> None:
        span = tracer.start_span("chat claude-sonnet-4-6", attributes=start)
        span.set_attributes(finish)
        span.end()

    req = parse_request((), kwargs(), False)
    segments = C._segments(req)

    def fold() -> None:
        span = tracer.start_span("chat claude-sonnet-4-6")
        env = tel.ctx._call_envelope(span)
        fold_call(env, span, max_tokens=200_000, reserved_tokens=300,
                  overflow_strategy="reject", segments=segments, blocks=req.blocks,
                  sources=None, capture=False)
        span.end()

    def fold_stop() -> None:  # what a call's records cost with the envelope objects
        span = tracer.start_span("chat claude-sonnet-4-6")
        env = tel.ctx._call_envelope(span)
        budget = fold_call(env, span, max_tokens=200_000, reserved_tokens=300,
                           overflow_strategy="reject", segments=segments, blocks=req.blocks,
                           sources=None, capture=False)
        budget.actual(tokens=900, items=len(req.blocks))
        budget.stop()
        env.stop()
        span.end()

    def record() -> None:  # the same records through CallRecord (a call outside envelopes)
        span = tracer.start_span("chat claude-sonnet-4-6")
        rec = CallRecord(tel.ctx, span)
        rec.begin(200_000, 300, "reject", segments, req.blocks, False, None)
        rec.actual.update({"context.budget.actual_tokens": 900,
                           "context.budget.actual_items": len(req.blocks)})
        rec.stop(None)
        span.end()

    def envelope() -> None:
        span = tracer.start_span("chat claude-sonnet-4-6")
        tel.ctx._call_envelope(span).stop()
        span.end()

    # -- an OpenAI chat stream: the benchmark's 15 chunks, from a list (no network) --------
    from openai.types.chat import ChatCompletionChunk
    from opentelemetry.instrumentation.genai.openai.chat_wrappers import ChatStreamWrapper

    from otel_agent_context.instrumentation._stub import REPLY
    from otel_agent_context.instrumentation.openai import _extract as OX

    chat_api = C.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator,
                     OX.chat_is_stream, OX.PROVIDER)
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini", "system_fingerprint": "fp_stub"}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "finish_reason": None}]}]
    events += [{**base, "choices": [{"index": 0, "delta": {"content": w + " "},
                                     "finish_reason": None}]}
               for w in REPLY.split(" ")]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append({**base, "choices": [], "usage": {"prompt_tokens": 900,
                                                    "completion_tokens": 12,
                                                    "total_tokens": 912}})
    chunks = [ChatCompletionChunk.model_validate(e) for e in events]

    class _Response:
        def close(self) -> None:
            pass

    class _Stream:
        """An SDK stream's shape: iterable, ``close()``, its HTTP ``response``."""

        def __init__(self) -> None:
            self.response = _Response()

        def __iter__(self) -> Any:
            return iter(chunks)

        def close(self) -> None:
            pass

    def chat_kwargs() -> dict[str, Any]:
        return {"model": "gpt-4o-mini", "messages": bench.HISTORY,
                "max_completion_tokens": 300, "stream": True,
                "stream_options": {"include_usage": True}}

    chat_where = {"request_model": "gpt-4o-mini", "server_address": "127.0.0.1",
                  "server_port": 8000}

    def stream(light: bool = True, official: str = "none") -> None:
        """Ours alone, the official wrapper alone ("alone"), or both: the official inside
        ours ("inner") or outside ("outer")."""
        if official == "alone":
            inv = other.inference("openai", operation_name="chat", **chat_where)
            for _ in ChatStreamWrapper(_Stream(), inv, False):
                pass
            return
        outer = other.inference("openai", operation_name="chat", **chat_where) \
            if official == "outer" else None
        call = tel.start(chat_api, (), chat_kwargs(), "127.0.0.1", 8000, light,
                         official == "inner")
        sdk: Any = _Stream()
        if official == "inner":
            sdk = ChatStreamWrapper(sdk, other.inference("openai", operation_name="chat",
                                                         **chat_where), False)
        wrapped = C._wrap_result(call, chat_api, sdk, True, False)
        if outer is not None:
            wrapped = ChatStreamWrapper(wrapped, outer, False)
        for _ in wrapped:
            pass

    def accumulate() -> None:
        acc = OX.ChatAccumulator(False)
        for chunk in chunks:
            acc.add(chunk)
        acc.result()

    pieces = {
        "nothing": lambda: None,  # what counting itself costs (callgrind_control's process)
        "stream": stream,
        "stream_util": lambda: stream(False),
        "stream_official": lambda: stream(official="alone"),
        "stream_ours_outer": lambda: stream(official="inner"),
        "stream_ours_outer_util": lambda: stream(False, official="inner"),
        "stream_ours_inner": lambda: stream(official="outer"),
        "stream_ours_inner_util": lambda: stream(False, official="outer"),
        "stream_accumulate": accumulate,
        "whole": whole,
        "whole_util": lambda: whole(False),
        "whole_ours_outer": lambda: whole_composed(True),
        "whole_ours_inner": lambda: whole_composed(False),
        "light": lambda: invocation(LightInference(
            tel.handler, "anthropic", request_model="claude-sonnet-4-6",
            server_address="127.0.0.1", server_port=8000, context=None)),
        "util": lambda: invocation(tel.handler.inference(
            "anthropic", request_model="claude-sonnet-4-6", server_address="127.0.0.1",
            server_port=8000, operation_name="chat")),
        "ours_outer_util": lambda: composed(True, False),
        "ours_outer_light": lambda: composed(True, True),
        "ours_inner_util": lambda: composed(False, False),
        "ours_inner_light": lambda: composed(False, True),
        "bare": bare,
        "request": lambda: parse_request((), kwargs(), False),
        "response": lambda: parse_response(msg, False),
        "materialize": lambda: C._materialize(kwargs()),
        # both, as a call reads its request (the reader settling its messages, if it does)
        "read": lambda: C._materialize(k := kwargs(), *(
            (api.settles,) if hasattr(api, "settles") else ())) and parse_request((), k, False),
        "segments": lambda: (C._segments(req), C.distinct_ids(req.blocks)),
        "fold": fold,
        "fold_stop": fold_stop,
        "record": record,
        "envelope": envelope,
    }
    for name, fn in pieces.items():
        if only is not None and name not in only:
            continue
        for _ in range(3):
            fn()
        exporter.clear()
        callgrind.count(fn, calls, name)
        exporter.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--api", choices=("anthropic", "openai"), default="anthropic",
                        help="the Anthropic messages request (default) or the OpenAI chat one")
    parser.add_argument("--only", help="comma-separated pieces (default: all)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.calls, args.api, args.only.split(",") if args.only else None)
        return
    if not callgrind.available():
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    env = {**os.environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT"}
    counts = callgrind.run([sys.executable, __file__, "--child", "--calls", str(args.calls),
                            "--api", args.api]
                           + (["--only", args.only] if args.only else []), env, args.calls)
    for name, value in counts.items():
        print(f"{name:12s} {value / 1e3:8,.0f}K instructions")


if __name__ == "__main__":
    main()
