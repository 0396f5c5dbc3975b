"""The offline example agents run and print complete rebuilt bundles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _bundles(stdout: str) -> list[dict]:
    out, depth, buf = [], 0, []
    for line in stdout.splitlines():
        if line == "{":
            depth, buf = 1, [line]
        elif depth:
            buf.append(line)
            if line == "}":
                out.append(json.loads("\n".join(buf)))
                depth = 0
    return out


@pytest.mark.parametrize("name,calls", [("openai_agent.py", 2), ("anthropic_agent.py", 4)])
def test_example_runs_offline(name: str, calls: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "agent: The order shipped" in proc.stdout
    bundles = _bundles(proc.stdout)
    assert len(bundles) == calls
    assert all(b["rebuild"] == "complete" for b in bundles)
    assert all(b["budget"]["actual_tokens"] > 0 for b in bundles)
    if name == "anthropic_agent.py":
        assert bundles[-1]["compaction"]["method"] == "provider_context_editing"
        assert bundles[-1]["compaction"]["source_item_refs"] == [
            "tool_result:toolu_0", "tool_result:toolu_1"]


def test_framework_examples_run_offline() -> None:
    """The Agents SDK and MCP examples (issue 12): each prints its envelopes, complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    agents = subprocess.run([sys.executable, str(EXAMPLES / "openai_agents_app.py")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert agents.returncode == 0, agents.stderr
    runs = _bundles(agents.stdout)
    assert [b["scope"] for b in runs].count("turn") == 2
    assert [b["scope"] for b in runs].count("handoff") == 1
    assert all(b["rebuild"] == "complete" for b in runs)
    assert {b["conversation"] for b in runs if b["scope"] == "turn"} == {"customer-1234"}
    mcp = subprocess.run([sys.executable, str(EXAMPLES / "mcp_client_app.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert mcp.returncode == 0, mcp.stderr
    (bundle,) = _bundles(mcp.stdout)
    kinds = sorted(kind for _, kind, _, _ in bundle["items"])
    assert kinds == ["external_resource", "tool_result", "user_message"]
    assert bundle["model_calls"] == 1 and bundle["rebuild"] == "complete"
    assert "Refunds are accepted" not in mcp.stdout.split("agent:")[-1]  # no content


def test_llama_index_example_runs_offline() -> None:
    """The LlamaIndex example: a query whose cutoff drops two nodes, three chat turns whose
    memory cuts the first exchange, the prompts naming the nodes they carry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    proc = subprocess.run([sys.executable, str(EXAMPLES / "llama_index_app.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("The order shipped") == 4
    query, *turns = _bundles(proc.stdout)
    assert len(turns) == 3 and all(b["rebuild"] == "complete" for b in [query, *turns])
    assert [reason for _, reason, _ in query["omitted"]] == ["low_relevance"] * 2
    assert query["prompt_sources"] == query["selected"]
    assert [len(b["memory_cut"]) for b in turns] == [0, 0, 2]
    assert all(sorted(b["prompt_sources"][0]) == sorted(b["selected"][0]) for b in turns)


def test_llama_index_agents_example_runs_offline() -> None:
    """The LlamaIndex agents example: the workflow's run (the triage agent's call), its
    handoff (the order agent's call, what went across), the ReAct agent's run (its action and
    its answer); no content exported (capture is off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    proc = subprocess.run([sys.executable, str(EXAMPLES / "llama_index_agents_app.py")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("The order shipped") == 2  # the two answers
    bundles = {(b["scope"], b["agent"]): b for b in _bundles(proc.stdout)}
    assert sorted(bundles) == [("handoff", "Order agent"), ("turn", "ReAct order agent"),
                               ("turn", "Triage agent")]
    run, handoff = bundles[("turn", "Triage agent")], bundles[("handoff", "Order agent")]
    assert (run["model_calls"], handoff["model_calls"],
            bundles[("turn", "ReAct order agent")]["model_calls"]) == (1, 1, 2)
    assert handoff["parent_id"] == run["context_id"] and run["parent_id"] is None
    assert handoff["actors"] == ["agent:Triage agent", "agent:Order agent"]
    (handed,) = handoff["handed_over"]
    assert len(handed) == 4 and handed[0].startswith("llama_index_handoff:")
    assert all(b["rebuild"] == "complete" for b in bundles.values())
