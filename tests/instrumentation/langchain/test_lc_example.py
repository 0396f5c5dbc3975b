"""``examples/langchain_agent.py`` runs offline and prints the bundle it rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[3] / "examples" / "langchain_agent.py"


def test_example_prints_the_rebuilt_bundle() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--full"], env=env,
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    assert first == "agent: Refunds are issued within 14 days."
    decoder, bundles, at = json.JSONDecoder(), [], 0
    while rest[at:].strip():
        found, at = decoder.raw_decode(rest, at + len(rest[at:]) - len(rest[at:].lstrip()))
        bundles.append(found)
    # the agent's turn, and the summarizer's model call in an envelope of its own
    by_scope = {b["context_envelope"]["scope"]: b for b in bundles}
    assert sorted(by_scope) == ["task", "turn"]
    bundle = by_scope["turn"]
    summarizer = by_scope["task"]
    assert summarizer["context_envelope"]["parent_id"] == \
        bundle["context_envelope"]["context_id"]
    env_rec = bundle["context_envelope"]
    assert env_rec["metadata"] == {"gen_ai.agent.name": "support_agent",
                                   "gen_ai.conversation.id": "order-1042"}
    assert bundle["rebuild"]["status"] == "complete"

    (sel,) = bundle["context_selections"]
    assert sel["selected_item_refs"] == ["kb-faq-refunds"]
    assert [(o["item_id"], o["reason"]) for o in sel["omitted_item_refs"]] == [
        ("kb-refunds", "duplicate_coverage"), ("kb-about", "low_relevance"),
        ("kb-shipping", "low_relevance")]
    (summarizer_input,) = summarizer["context_budgets"]
    assert [r["item_id"] for r in summarizer_input["truncation_records"]] == [
        "user-1", "agent-1"]
    (window,) = bundle["context_budgets"]
    assert (window["max_tokens"], window["overflow"]) == (60, False)
    (comp,) = bundle["context_compactions"]
    assert comp["method"] == "rolling_summary"
    assert comp["source_item_refs"] == ["user-1", "agent-1", "user-2", "agent-2"]
    assert [c["covered"] for c in comp["source_coverage"]] == [False, False, True, True]
    assert 0 < comp["coverage"] < 1
    # no content without the capture switch
    assert all("content" not in item for item in bundle["context_items"])
