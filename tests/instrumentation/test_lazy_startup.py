"""Instrumenting imports no client library: a library is wrapped when the application
imports it (a post-import hook), so start-up costs nothing for the libraries it never uses,
and ``uninstrument()`` before the import leaves it alone. In a fresh interpreter each time:
``sys.modules`` is what is tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from stub_server import StubServer

LIBRARIES = ("openai", "anthropic", "langchain_core", "langgraph", "agents", "mcp",
             "llama_index", "llama_index_instrumentation")

PROGRAM = textwrap.dedent("""
    import json, os, sys, warnings
    original_warn = warnings.warn
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_agent_context.instrumentation import instrument, uninstrument

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    done = instrument(tracer_provider=provider)
    loaded = [m for m in %(libraries)r if m in sys.modules]
    if os.environ.get("UNINSTRUMENT_FIRST"):
        uninstrument()
    warn_kept = warnings.warn is original_warn  # nothing wrapped yet: warnings untouched
    import openai  # the application's first use of the library, after instrumenting
    client = openai.OpenAI(base_url=os.environ["STUB_URL"] + "/v1", api_key="sk-test",
                           max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Where is my order?"}])
    print(json.dumps({"done": done, "loaded": loaded, "warn_kept": warn_kept,
                      "warn_after": warnings.warn is original_warn,
                      "reply": reply.choices[0].message.content,
                      "spans": sorted(s.name for s in memory.get_finished_spans()),
                      "blocks": [s.attributes.get("context.assembly.block_count")
                                 for s in memory.get_finished_spans()]}))
""") % {"libraries": LIBRARIES}


def _run(**env: str) -> dict:
    with StubServer() as stub:
        proc = subprocess.run(
            [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                 "STUB_URL": stub.url, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_instrument_imports_no_client_library_and_wraps_it_on_import() -> None:
    out = _run()
    assert {"OpenAIContextInstrumentor", "AnthropicContextInstrumentor",
            "LangChainContextInstrumentor", "OpenAIAgentsContextInstrumentor",
            "MCPContextInstrumentor", "LlamaIndexContextInstrumentor",
            } <= set(out["done"])  # every framework the suite has
    assert out["loaded"] == []  # nothing imported by instrument()
    # warnings' frame counting (transparency) only once a client is wrapped
    assert out["warn_kept"] is True and out["warn_after"] is False
    assert out["spans"] == ["chat gpt-4o-mini"]  # the folded form: one span a call
    assert out["blocks"] == [1]  # carrying the call's assembly: its one message


def test_uninstrument_before_the_import_leaves_the_library_alone() -> None:
    out = _run(UNINSTRUMENT_FIRST="1")
    assert out["loaded"] == []
    assert out["spans"] == []
    assert out["warn_after"] is True  # nothing wrapped, nothing of ours in warnings
    assert out["reply"]  # the application works as without us
