"""Instructions per LlamaIndex turn (callgrind), the configurations of
``llama_index_bench.py``: a count that the machine's load does not move. Issue 12.

    python benchmarks/llama_index_ir.py --turns 10

Runs itself under ``valgrind --tool=callgrind --instr-atstart=no`` (Debian's ``valgrind``
package), one process for every configuration in turn: each is instrumented, warmed up, then
callgrind counts only around its ``--turns`` turns (``callgrind_control -i on`` / ``off``,
then a dump), with the garbage collector off while it counts (a collection lands in one
configuration or another by chance). The count covers every thread of the process, the
in-process stub's included (the same requests in every configuration, so the same work);
what a configuration adds is its count less the uninstrumented one's. Instructions are not
time (cache misses and allocation are not weighed), but they rank changes of a few percent
that the timing runs on a shared machine cannot.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind  # noqa: E402

_CHILD = "LLAMA_INDEX_IR_CHILD"
CONFIGS = ("uninstrumented", "openai only", "openai + llama_index", "official GenAI")


def _child(turns: int, configs: list[str]) -> None:
    import llama_index_bench as bench
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agent_context import AgentContext

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = AgentContext(tracer_provider=provider, capture_content=False)
    insts = (bench.OpenAIContextInstrumentor(), bench.LlamaIndexContextInstrumentor(),
             bench._official())
    with bench.StubServer() as stub:
        fns = bench._turns(stub.openai_base_url)
        for c, config in enumerate(configs):
            bench.switch(config, True, ctx, provider, insts)
            for t, fn in enumerate(fns.values()):
                for _ in range(5):
                    fn()
                exporter.clear()
                callgrind.count(fn, turns, f"c{c}t{t}")
                exporter.clear()
            bench.switch(config, False, ctx, provider, insts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    if os.environ.get(_CHILD):
        _child(args.turns, os.environ[_CHILD].split(","))
        return
    if not callgrind.available():
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    try:
        import opentelemetry.instrumentation.genai.llama_index  # noqa: F401
        configs = list(CONFIGS)
    except ImportError:
        print("official GenAI: not installed, not counted (pip install -e '.[bench]')")
        configs = list(CONFIGS[:3])
    found = callgrind.run([sys.executable, __file__, "--turns", str(args.turns)],
                          {**os.environ, _CHILD: ",".join(configs)}, args.turns)
    counts = {(c, t): found[f"c{c}t{t}"] for c in range(len(configs)) for t in range(2)}
    turn_names = ("query engine turn", "context chat turn")
    print(f"{args.turns} turns a configuration; million instructions a turn (all threads)")
    print("| turn | configuration | Ir | added |")
    print("|---|---|---:|---:|")
    for t, name in enumerate(turn_names):
        base = counts[(0, t)]
        for c, config in enumerate(configs):
            added = "" if c == 0 else f"+{(counts[(c, t)] - base) / 1e6:.2f}"
            print(f"| {name} | {config} | {counts[(c, t)] / 1e6:.2f} | {added} |")
    if len(configs) == 4:
        print()
        print("| turn | ours added ÷ official added (goal ≤ 1.5) |")
        print("|---|---:|")
        for t, name in enumerate(turn_names):
            base = counts[(0, t)]
            ratio = (counts[(2, t)] - base) / (counts[(3, t)] - base)
            print(f"| {name} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
