"""Added cost per LlamaIndex turn: a query engine turn (retriever, similarity cutoff,
synthesizer, one model call) and a context chat engine turn (retriever, memory, one model
call; the same two-exchange history each turn, cut by the memory), uninstrumented, with the
OpenAI context instrumentor alone (the model call recorded, loose), and with the LlamaIndex
instrumentor too (the turn, its retrieval, memory and prompt-to-node links). Issue 12.

    python benchmarks/llama_index_bench.py --rounds 6 --turns 40

One process; the configurations alternate round by round (the LlamaIndex span handler and
the OpenAI wrappers come off cleanly), each timing ``--turns`` turns one by one after a
warm-up: wall (``perf_counter_ns``) and the calling thread's CPU (``thread_time_ns``). The
stub answers in a thread of its own (its CPU is not the caller's). Spans go through a
``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (export cost on the caller), content
capture off. Reported: per configuration, the median over rounds of each round's median, and
what each adds over the uninstrumented turn.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "instrumentation" / "llama_index"))

import li_app  # noqa: E402  (the tests' LlamaIndex app: the same engines)
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.memory import ChatMemoryBuffer  # noqa: E402
from llama_index.core.postprocessor import SimilarityPostprocessor  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from otel_agent_context import AgentContext  # noqa: E402
from otel_agent_context.instrumentation._stub import REPLY, StubServer  # noqa: E402
from otel_agent_context.instrumentation.llama_index import (  # noqa: E402
    LlamaIndexContextInstrumentor,
)
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor  # noqa: E402

CONFIGS = ("uninstrumented", "openai only", "openai + llama_index", "official GenAI")


def _official() -> list[Any]:
    """The official GenAI instrumentors for LlamaIndex and OpenAI (the ``bench`` extra), or
    none when they are not installed (the configuration is then reported missing)."""
    try:
        from opentelemetry.instrumentation.genai.llama_index import LlamaIndexInstrumentor
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    except ImportError:
        return []
    return [LlamaIndexInstrumentor(), OpenAIInstrumentor()]


def _turns(base_url: str) -> dict[str, Callable[[], Any]]:
    index = li_app.build_index(base_url)
    query = index.as_query_engine(
        similarity_top_k=3,
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=li_app.CUTOFF)])
    chat = index.as_chat_engine(chat_mode="context", similarity_top_k=2,
                                memory=ChatMemoryBuffer.from_defaults(
                                    token_limit=li_app.TOKEN_LIMIT,
                                    tokenizer_fn=lambda text: text.split()))
    # the same history every turn (two exchanges, over the memory's limit: cut each time)
    history = [ChatMessage(role=role, content=text) for role, text in (
        ("user", "When does support answer the phone?"), ("assistant", REPLY),
        ("user", "And how long do refunds take?"), ("assistant", REPLY))]
    return {"query engine turn": lambda: query.query(li_app.QUESTION),
            "context chat turn": lambda: chat.chat("Do returns need the original packaging?",
                                                   chat_history=list(history))}


def switch(config: str, on: bool, ctx: AgentContext, provider: TracerProvider,
           insts: tuple[Any, Any, list[Any]]) -> None:
    """Instrument for ``config`` (``on``), or take its instrumentors off again."""
    openai_inst, li_inst, official = insts
    if not on:
        for inst in official if config == "official GenAI" else ():
            inst.uninstrument()
        for inst in (li_inst, openai_inst):
            if inst.is_instrumented_by_opentelemetry:
                inst.uninstrument()
        return
    if config == "official GenAI":
        for inst in official:
            inst.instrument(tracer_provider=provider)
    elif config != "uninstrumented":
        openai_inst.instrument(agent_context=ctx, tracer_provider=provider)
    if config == "openai + llama_index":
        li_inst.instrument(agent_context=ctx)


def _time(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        fn()
        cpu.append(time.thread_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    return statistics.median(wall) / 1e3, statistics.median(cpu) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = AgentContext(tracer_provider=provider, capture_content=False)
    openai_inst, li_inst = OpenAIContextInstrumentor(), LlamaIndexContextInstrumentor()
    official = _official()
    configs = CONFIGS if official else CONFIGS[:3]
    if not official:
        print("official GenAI: not installed, not timed (pip install -e '.[bench]')")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with StubServer() as stub:
        turns = _turns(stub.openai_base_url)
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for config in order:
                switch(config, True, ctx, provider, (openai_inst, li_inst, official))
                for name, fn in turns.items():
                    for _ in range(args.warmup):
                        fn()
                    results.setdefault((config, name), []).append(_time(fn, args.turns))
                    exporter.clear()
                switch(config, False, ctx, provider, (openai_inst, li_inst, official))
    print(f"{args.rounds} rounds x {args.turns} turns; microseconds, median over rounds")
    print("| turn | configuration | wall | caller CPU | CPU added |")
    print("|---|---|---|---|---|")
    for name in turns:
        base = statistics.median(c for _, c in results[("uninstrumented", name)])
        for config in configs:
            rows = results[(config, name)]
            wall = statistics.median(w for w, _ in rows)
            cpu = statistics.median(c for _, c in rows)
            added = "" if config == "uninstrumented" else f"+{cpu - base:.0f}"
            print(f"| {name} | {config} | {wall:.0f} | {cpu:.0f} | {added} |")
    if official:
        print()
        print("| turn | ours (openai + llama_index) added | official GenAI added | ours ÷ official "
              "(goal ≤ 1.5) |")
        print("|---|---:|---:|---:|")
        for name in turns:
            base = statistics.median(c for _, c in results[("uninstrumented", name)])
            ours = statistics.median(c for _, c in results[("openai + llama_index", name)]) - base
            theirs = statistics.median(c for _, c in results[("official GenAI", name)]) - base
            ratio = f"{ours / theirs:.2f}" if theirs > 0 else "–"
            print(f"| {name} | {ours:.0f} | {theirs:.0f} | {ratio} |")


if __name__ == "__main__":
    main()
