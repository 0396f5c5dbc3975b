"""``opentelemetry-instrument python frameworks_app.py``: an unmodified OpenAI Agents SDK app
and MCP client session in a subprocess, ours enabled through the entry points alone, spans
over real OTLP/gRPC to a receiver here, rebuilt into bundles (issue 12's frameworks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stub_server import REPLY, StubServer
from test_llm_subprocess import receiver  # noqa: F401 - the OTLP receiver fixture

from otel_agent_context.rebuild import rebuild

HERE = Path(__file__).parent


@pytest.mark.parametrize("capture", [False, True], ids=["no_content", "content"])
def test_agents_sdk_and_mcp_under_opentelemetry_instrument(receiver, capture: bool) -> None:  # noqa: F811
    rec, port = receiver
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({
        "OTEL_SERVICE_NAME": "frameworks-app", "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100",
        "NO_PROXY": "127.0.0.1,localhost",
        # ours only: the official instrumentors stay installed but off
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai,anthropic,agent_context_langchain",
    })
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    with StubServer() as stub:
        env["STUB_URL"] = stub.url
        proc = subprocess.run([str(launcher), sys.executable, str(HERE / "frameworks_app.py")],
                              env=env, capture_output=True, text=True, timeout=120)
        requests = list(stub.requests)
    assert proc.returncode == 0, proc.stderr
    assert f"agents: {REPLY} | {REPLY} | {REPLY}" in proc.stdout
    assert f"mcp: {REPLY}" in proc.stdout
    assert [path for path, _ in requests].count("/v1/responses") == 6
    deadline = time.monotonic() + 15
    bundles: list[dict] = []
    while time.monotonic() < deadline:
        bundles = rebuild([view for _, view in rec.spans])
        # 3 runs and a handoff; the MCP reads outside any envelope are an implicit turn each
        # (a resource, a tool result), and so is the model call after them
        if len(bundles) >= 7:
            break
        time.sleep(0.1)
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
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)
    exported = json.dumps([view.attributes for _, view in rec.spans] +
                          [e.attributes for _, view in rec.spans for e in view.events])
    assert ("Refunds are accepted" in exported) is capture
    assert ("What is the weather in Paris?" in exported) is capture
