"""``opentelemetry-instrument python frameworks_app.py``: an unmodified OpenAI Agents SDK app
and MCP client session in a subprocess (and ``llama_index/li_app.py``, a LlamaIndex app), ours
enabled through the entry points alone, spans over real OTLP/gRPC to a receiver here, rebuilt
into bundles (issue 12's frameworks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stub_server import REPLY, StubServer
from test_llm_subprocess import receiver  # noqa: F401 - the OTLP receiver fixture

from otel_agent_context.rebuild import rebuild

HERE = Path(__file__).parent


def _launch(app: Path, port: int, capture: bool) -> tuple[Any, list[Any]]:
    """``opentelemetry-instrument python app`` exporting to the receiver on ``port``, with the
    stub's URL in ``STUB_URL``: the finished process and the requests the stub got."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({
        "OTEL_SERVICE_NAME": app.stem, "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100",
        "NO_PROXY": "127.0.0.1,localhost",
        # ours only: the official instrumentors stay installed but off
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS":
            "openai,anthropic,langchain,openai_agents,llama_index,agent_context_langchain",
    })
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    with StubServer() as stub:
        env["STUB_URL"] = stub.url
        proc = subprocess.run([str(launcher), sys.executable, str(app)],
                              env=env, capture_output=True, text=True, timeout=120)
        return proc, list(stub.requests)


def _plain(app: Path) -> tuple[Any, list[Any]]:
    """The same app run with plain ``python``, no instrumentation: what it printed and the
    requests the stub got, to compare with the instrumented run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    with StubServer() as stub:
        env["STUB_URL"] = stub.url
        proc = subprocess.run([sys.executable, str(app)], env=env, capture_output=True,
                              text=True, timeout=120)
        return proc, list(stub.requests)


@pytest.mark.parametrize("app", ["frameworks_app.py", "llama_index/li_app.py",
                                 "llama_index/li_agent_app.py"])
def test_the_apps_output_and_requests_are_the_same_with_and_without(
        receiver, app: str) -> None:  # noqa: F811
    """What the application printed and every request body its frameworks sent (paths and
    JSON bodies, in order) are the same under ``opentelemetry-instrument`` as without it."""
    _, port = receiver
    instrumented, sent = _launch(HERE / app, port, False)
    plain, sent_plain = _plain(HERE / app)
    assert instrumented.returncode == plain.returncode == 0, instrumented.stderr + plain.stderr
    # li_agent_app also prints whether its own envelope is still current after the run: a
    # fact about the telemetry (no SDK: a no-op envelope), not about what the app did
    assert [re.sub(r" (True|False)$", "", line) for line in instrumented.stdout.splitlines()] \
        == [re.sub(r" (True|False)$", "", line) for line in plain.stdout.splitlines()]
    assert len(sent) == len(sent_plain) > 0
    assert sent == sent_plain


def _bundles(rec: Any, enough: Callable[[list[dict]], bool]) -> list[dict]:
    """The bundles rebuilt from what the receiver got, once ``enough`` (or after 15 s)."""
    deadline = time.monotonic() + 15
    bundles: list[dict] = []
    while time.monotonic() < deadline:
        bundles = rebuild([view for _, view in rec.spans])
        if enough(bundles):
            break
        time.sleep(0.1)
    return bundles


@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
def test_agents_sdk_and_mcp_under_opentelemetry_instrument(receiver, capture: bool) -> None:  # noqa: F811
    rec, port = receiver
    proc, requests = _launch(HERE / "frameworks_app.py", port, capture)
    assert proc.returncode == 0, proc.stderr
    assert f"agents: {REPLY} | {REPLY} | {REPLY}" in proc.stdout
    assert f"mcp: {REPLY}" in proc.stdout
    assert [path for path, _ in requests].count("/v1/responses") == 6
    # 3 runs and a handoff; the MCP reads outside any envelope are an implicit turn each
    # (a resource, a tool result), and so is the model call after them
    bundles = _bundles(rec, lambda bs: len(bs) >= 7)
    envelopes = [b["context_envelope"] for b in bundles]
    runs = [e for e in envelopes
            if (e.get("metadata") or {}).get("gen_ai.agent.name") == "Triage agent"]
    assert len(runs) == 3 and all(e["scope"] == "turn" for e in runs)
    assert {e["metadata"]["gen_ai.conversation.id"] for e in runs} == {"conversation-42"}
    assert [e["scope"] for e in envelopes].count("handoff") == 1
    items = [i for b in bundles for i in b.get("context_items", [])]
    mcp = {i["item_id"].split(":")[0]: i for i in items if i["item_id"].startswith("mcp_")}
    assert set(mcp) == {"mcp_resource", "mcp_tool"}
    assert mcp["mcp_tool"]["source_refs"][0]["external_mappings"]["mcp.tool_name"] == \
        "order_status"
    # the JSON-RPC ids of the requests (sent as jsonrpc.request.id), mapped back
    assert {k: mcp[k]["source_refs"][0]["external_mappings"]["mcp.jsonrpc_request_id"]
            for k in mcp} == {"mcp_resource": "2", "mcp_tool": "3"}
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)
    exported = json.dumps([view.attributes for _, view in rec.spans] +
                          [e.attributes for _, view in rec.spans for e in view.events])
    assert ("Refunds are accepted" in exported) is capture
    assert ("What is the weather in Paris?" in exported) is capture


def test_llama_index_app_under_opentelemetry_instrument(receiver) -> None:  # noqa: F811
    """The LlamaIndex app (a query with a similarity cutoff, three chat turns over a
    ``ChatMemoryBuffer`` too small for them, three over a ``Memory`` with a memory block),
    unmodified."""
    rec, port = receiver
    proc, _ = _launch(HERE / "llama_index" / "li_app.py", port, False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"ask: {REPLY}", "chat: " + " | ".join([REPLY] * 3),
                                        "memory: " + " | ".join([REPLY] * 3)]
    bundles = _bundles(rec, lambda bs: len(bs) >= 7 and all(
        b.get("context_assemblies") for b in bs))
    assert [b["context_envelope"]["scope"] for b in bundles] == ["turn"] * 7
    ask, *chats = sorted(bundles, key=lambda b: b["context_envelope"]["created_at"])
    turns, memory = chats[:3], chats[3:]
    (selection,) = ask["context_selections"]
    assert selection["selected_item_refs"] == ["kb-refunds"]
    assert [(o["item_id"], o["reason"]) for o in selection["omitted_item_refs"]] == [
        ("kb-returns", "low_relevance"), ("kb-shipping", "low_relevance")]
    assert ask["context_assemblies"][0]["ordered_blocks"][-1]["source_item_refs"] == [
        "kb-refunds"]
    cut = [r for b in turns for x in b["context_budgets"]
           for r in x.get("truncation_records", [])]
    assert [r["tokens_before"] for r in cut] == [6, 11]  # the first exchange, in words
    # Memory: each later turn flushes the exchange before it into the block, a compaction
    assert [[(r["tokens_before"], r["strategy"]) for x in b["context_budgets"]
             for r in x.get("truncation_records", []) if x["max_tokens"] == 21]
            for b in memory] == [[], [(6, "summarize_oldest"), (11, "summarize_oldest")],
                                 [(6, "summarize_oldest"), (11, "summarize_oldest")]]
    assert [len(b.get("context_compactions", [])) for b in memory] == [0, 1, 1]
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)


def test_llama_index_agents_under_opentelemetry_instrument(receiver) -> None:  # noqa: F811
    """LlamaIndex agents, unmodified: an ``AgentWorkflow`` whose triage agent hands off to the
    order agent, the same inside the app's own envelope (its handoff a child of the app's
    envelope), then a ``ReActAgent`` run twice over one memory."""
    rec, port = receiver
    proc, requests = _launch(HERE / "llama_index" / "li_agent_app.py", port, False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"workflow: {REPLY}", f"in envelope: {REPLY} True",
                                        f"react: {REPLY} | {REPLY}"]
    assert len(requests) == 7
    bundles = _bundles(rec, lambda bs: len(bs) >= 6 and all(
        b["rebuild"]["status"] == "complete" for b in bs))
    envelopes = sorted((b["context_envelope"] for b in bundles), key=lambda e: e["created_at"])
    assert [(e["scope"], e["metadata"]["gen_ai.agent.name"]) for e in envelopes] == [
        ("turn", "Triage agent"), ("handoff", "Order agent"), ("turn", "Support desk"),
        ("handoff", "Order agent"), ("turn", "Order agent"), ("turn", "Order agent")]
    for run, handoff in (envelopes[:2], envelopes[2:4]):
        assert handoff["parent_id"] == run["context_id"]
        assert handoff["actor_refs"] == ["agent:Triage agent", "agent:Order agent"]
    # each model call once: the triage agent's in the run's (or the app's) envelope, the
    # order agent's in the handoff's
    assert [len(e["assembly_refs"]) for e in envelopes] == [1, 1, 1, 1, 2, 1]
