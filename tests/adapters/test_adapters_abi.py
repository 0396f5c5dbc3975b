"""Context Runtime ABI: the seed's session folder maps to the exact bundle expected.

The expected bundle is written by hand from the seed text (seed 003) and the fixture
folder built from it (tests/adapters/fixtures/abi/seed_session: the seed's pack.json,
facts.jsonl, decisions.jsonl, refs.jsonl, swap and dedup index.jsonl, plus 240 messages of
10 tokens each, a summary citing messages:1-150 and a todo citing messages:190-200). Digests
are sha256 of the fixture bytes, taken here with hashlib. The path is the full one: the
adapter's records are emitted as spans, and the spans are rebuilt.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from adapters_helpers import FILES_AT, PACK_AT, copy_session, events, ns, records, sha

from otel_agent_context import Bundle
from otel_agent_context._digest import digest_bytes
from otel_agent_context.adapters import emit_session, read_session, session_bundle
from otel_agent_context.testing import CapturedTelemetry

AGENT_MAP = "context_runtime_abi"


def _file(session: Path, rel: str) -> bytes:
    return (session / rel).read_bytes()


def _pack_item(session: Path, rel: str, kind: str, ctx_kind: str, tokens: int) -> dict[str, Any]:
    data = _file(session, rel)
    return {
        "item_id": rel, "context_kind": ctx_kind, "content_mode": "ref", "content_ref": rel,
        "token_estimate": tokens, "byte_size": len(data), "digest": sha(data),
        "source_refs": [{"uri": rel, "source_kind": "file", "modified_at": FILES_AT,
                         "external_mappings": {f"{AGENT_MAP}.kind": kind}}],
    }


def _segments(*spec: tuple[int, int, bool]) -> tuple[list[str], list[dict[str, Any]]]:
    """Message ranges of 10 tokens a message: (ids, source_coverage)."""
    ids = [f"messages.jsonl#{a}-{b}" for a, b, _ in spec]
    cov = [{"item_id": f"messages.jsonl#{a}-{b}", "token_estimate": 10 * (b - a + 1),
            "covered": c} for a, b, c in spec]
    return ids, cov


def expected_seed_bundle(session: Path) -> dict[str, Any]:
    pack = _file(session, "context/pack.json")
    pack_sha = hashlib.sha256(pack).hexdigest()  # the watcher's own change key (plain)
    lines = _file(session, "messages.jsonl").splitlines(keepends=True)
    assert len(lines) == 240
    tail = b"".join(lines[200:240])  # tail:40 of 240 messages: lines 201-240
    context_id = f"abi:coder/default/pack-{ns(PACK_AT)}-{pack_sha[:8]}"

    system = _pack_item(session, "context/pinned/system.md", "system", "system_prompt", 1200)
    summary = _pack_item(session, "context/summary.md", "summary", "thread_summary", 1800)
    facts = _pack_item(session, "context/facts.jsonl", "facts", "durable_memory", 900)
    child = _pack_item(session, "context/child/rev-123/result.md", "child_result",
                       "peer_agent_message", 1000)
    recent = {
        "item_id": "messages.jsonl#tail:40", "context_kind": "session_history",
        "content_mode": "ref", "content_ref": "messages.jsonl", "token_estimate": 6000,
        "byte_size": len(tail), "digest": sha(tail),
        "source_refs": [{"uri": "messages.jsonl", "source_kind": "file",
                         "selector": "line_range:201-240", "modified_at": FILES_AT,
                         "external_mappings": {f"{AGENT_MAP}.kind": "recent_messages",
                                               f"{AGENT_MAP}.range": "tail:40"}}],
    }
    # swap/index.jsonl: out of the window, not deleted
    swap_abc = {
        "item_id": "context/swap/chunk/sha256-abc", "context_kind": "session_history",
        "content_mode": "ref", "content_ref": "context/swap/chunk/sha256-abc",
        "token_estimate": 18000, "digest": sha(_file(session, "context/swap/chunk/sha256-abc")),
        "source_refs": [{"uri": "messages.jsonl", "source_kind": "file",
                         "selector": "line_range:1-120",
                         "external_mappings": {f"{AGENT_MAP}.swap_id": "sha256-abc",
                                               f"{AGENT_MAP}.kind": "message_range",
                                               f"{AGENT_MAP}.range": "1-120"}}],
    }
    swap_def = {
        "item_id": "context/swap/chunk/sha256-def", "context_kind": "tool_result",
        "content_mode": "ref", "content_ref": "context/swap/chunk/sha256-def",
        "token_estimate": 45000, "digest": sha(_file(session, "context/swap/chunk/sha256-def")),
        "source_refs": [{"uri": "events.jsonl", "source_kind": "file", "selector": "event:ev-991",
                         "external_mappings": {f"{AGENT_MAP}.swap_id": "sha256-def",
                                               f"{AGENT_MAP}.kind": "tool_output",
                                               f"{AGENT_MAP}.event": "ev-991"}}],
    }

    # dedup/index.jsonl: every ref of a hash is an item; refs after the first are duplicates
    def dedup(item_id: str, ref: str, kind: str, tokens: int, size: int, h: str,
              **src: str) -> dict[str, Any]:
        return {"item_id": item_id, "context_kind": kind, "content_mode": "ref",
                "token_estimate": tokens, "byte_size": size, "digest": "sha256:" + h,
                "source_refs": [{"source_id": ref, **src, "external_mappings": {
                    f"{AGENT_MAP}.dedup_hash": "sha256-" + h}}]}

    dedup_items = [
        dedup("messages.jsonl#1-40", "messages:1-40", "session_history", 3000, 12000, "abc",
              uri="messages.jsonl", selector="line_range:1-40"),
        dedup("context/swap/chunk/old-design", "swap:old-design", "session_history", 3000,
              12000, "abc"),
        dedup("tool:test-output-1", "tool:test-output-1", "tool_result", 20000, 80000, "def"),
        dedup("tool:test-output-2", "tool:test-output-2", "tool_result", 20000, 80000, "def"),
    ]
    # refs.jsonl: r2 is the swap chunk already listed; r1 is a file outside the session
    design = {"item_id": "/work/DESIGN.md", "context_kind": "file_excerpt", "content_mode": "ref",
              "content_ref": "/work/DESIGN.md",
              "source_refs": [{"uri": "/work/DESIGN.md", "source_kind": "file",
                               "external_mappings": {f"{AGENT_MAP}.ref_id": "r1"}}]}
    surface_items = [system, summary, facts, recent, child, swap_abc, swap_def, *dedup_items,
                     design]
    selected = ["context/pinned/system.md", "context/summary.md", "context/facts.jsonl",
                "messages.jsonl#tail:40", "context/child/rev-123/result.md"]

    # compactions: history outside the window (tail:40 = 201-240) is messages 1-200,
    # 2000 tokens; each derived file covers the ranges it cites
    summary_ids, summary_cov = _segments((1, 150, True), (151, 200, False))
    facts_ids, facts_cov = _segments((1, 11, False), (12, 18, True), (19, 79, False),
                                     (80, 96, True), (97, 200, False))
    # d1 cites messages:200-230, of which 201-230 are in the window; d2 cites user:latest
    decisions_ids, decisions_cov = _segments((1, 199, False), (200, 200, True))
    todo_ids, todo_cov = _segments((1, 189, False), (190, 200, True))
    decisions_text = _file(session, "context/decisions.jsonl").decode()
    todo_text = _file(session, "context/todo.md").decode()

    def compaction(name: str, method: str, ids: list[str], cov: list[dict[str, Any]],
                   coverage: float, after: int) -> dict[str, Any]:
        return {"compaction_id": f"abi-compaction-{name}", "scope": "session_history",
                "method": method, "source_item_refs": ids, "source_coverage": cov,
                "summary_ref": f"context/{name}" + (".md" if name in ("summary", "todo")
                                                    else ".jsonl"),
                "coverage": coverage, "replacement_policy": "keep_history",
                "source_count": len(ids), "tokens_before": 2000, "tokens_after": after,
                "created_at": PACK_AT, "completed_at": PACK_AT}

    def summary_rec(rel: str, name: str, ids: list[str], coverage: float,
                    after: int) -> dict[str, Any]:
        return {"summary_id": rel, "compaction_ref": f"abi-compaction-{name}",
                "token_estimate": after, "digest": sha(_file(session, rel)),
                "refresh_policy": "rebuild_from_history", "coverage": coverage,
                "source_item_refs": ids, "created_at": PACK_AT}

    decisions_after = (len(decisions_text) + 3) // 4  # ~4 characters a token (no pack entry)
    todo_after = (len(todo_text) + 3) // 4
    segment_items = [{"item_id": c["item_id"], "context_kind": "session_history",
                      "token_estimate": c["token_estimate"]}
                     for c in summary_cov + facts_cov + decisions_cov + todo_cov]

    return {
        "context_envelope": {
            "context_id": context_id, "scope": "turn", "schema_version": "0.1",
            "lifecycle": "assembled", "created_at": PACK_AT, "completed_at": PACK_AT,
            "producer": "otel-agent-context/0.1.0", "actor_refs": ["agent:coder"],
            "runtime_refs": ["session:default"],
            "metadata": {"gen_ai.agent.name": "coder", "gen_ai.conversation.id": "default"},
            "surface_refs": ["abi-surface"], "item_refs": selected,
            "selection_refs": ["abi-selection"], "budget_ref": "abi-budget",
            "assembly_refs": ["abi-assembly"],
            "compaction_refs": ["abi-compaction-summary", "abi-compaction-facts",
                                "abi-compaction-decisions", "abi-compaction-todo"],
        },
        "context_surfaces": [{
            "surface_id": "abi-surface", "item_refs": [i["item_id"] for i in surface_items],
            "item_count": 12,
            # 1200+1800+900+6000+1000 + 18000+45000 + 3000+3000+20000+20000
            "token_estimate": 119900, "created_at": PACK_AT, "completed_at": PACK_AT,
        }],
        "context_items": surface_items + segment_items,
        "context_selections": [{
            "selection_id": "abi-selection", "surface_id": "abi-surface",
            "selection_policy": "context/pack.json", "budget_ref": "abi-budget",
            "candidate_count": 9,
            "candidate_item_refs": selected + [
                "context/swap/chunk/sha256-abc", "context/swap/chunk/sha256-def",
                "context/swap/chunk/old-design", "tool:test-output-2"],
            "selected_item_refs": selected,
            "omitted_item_refs": [
                {"item_id": "context/swap/chunk/sha256-abc", "reason": "budget",
                 "detail": "swapped out to context/swap/chunk/sha256-abc "
                           "(out of the window, not deleted)"},
                {"item_id": "context/swap/chunk/sha256-def", "reason": "budget",
                 "detail": "swapped out to context/swap/chunk/sha256-def "
                           "(out of the window, not deleted)"},
                {"item_id": "context/swap/chunk/old-design", "reason": "duplicate_coverage",
                 "detail": "same content as messages.jsonl#1-40 (sha256-abc)"},
                {"item_id": "tool:test-output-2", "reason": "duplicate_coverage",
                 "detail": "same content as tool:test-output-1 (sha256-def)"},
            ],
            "created_at": PACK_AT, "completed_at": PACK_AT,
        }],
        "context_budgets": [{
            "budget_id": "abi-budget", "target": "model", "max_tokens": 32000,
            "actual_tokens": 10900, "actual_items": 5, "overflow": False,
            "utilization": 10900 / 32000, "created_at": PACK_AT, "completed_at": PACK_AT,
        }],
        "context_assemblies": [{
            "assembly_id": "abi-assembly", "target": "model", "budget_ref": "abi-budget",
            "block_count": 5, "token_count": 10900, "hash": digest_bytes(bytes.fromhex(pack_sha)),
            "ordered_blocks": [
                {"index": 0, "item_id": "context/pinned/system.md",
                 "context_kind": "system_prompt", "tokens": 1200,
                 "injection_point": "system_prompt", "digest": system["digest"]},
                {"index": 1, "item_id": "context/summary.md", "context_kind": "thread_summary",
                 "tokens": 1800, "digest": summary["digest"]},
                {"index": 2, "item_id": "context/facts.jsonl", "context_kind": "durable_memory",
                 "tokens": 900, "digest": facts["digest"]},
                {"index": 3, "item_id": "messages.jsonl#tail:40",
                 "context_kind": "session_history", "tokens": 6000,
                 "injection_point": "message_history", "digest": sha(tail)},
                {"index": 4, "item_id": "context/child/rev-123/result.md",
                 "context_kind": "peer_agent_message", "tokens": 1000,
                 "digest": child["digest"]},
            ],
            "source_item_refs": selected, "created_at": PACK_AT,
        }],
        "context_compactions": [
            compaction("summary", "abstractive_summary", summary_ids, summary_cov, 0.75, 1800),
            compaction("facts", "structured_digest", facts_ids, facts_cov, 0.12, 900),
            compaction("decisions", "structured_digest", decisions_ids, decisions_cov, 0.005,
                       decisions_after),
            compaction("todo", "structured_digest", todo_ids, todo_cov, 0.055, todo_after),
        ],
        "context_summaries": [
            summary_rec("context/summary.md", "summary", summary_ids, 0.75, 1800),
            summary_rec("context/facts.jsonl", "facts", facts_ids, 0.12, 900),
            summary_rec("context/decisions.jsonl", "decisions", decisions_ids, 0.005,
                        decisions_after),
            summary_rec("context/todo.md", "todo", todo_ids, 0.055, todo_after),
        ],
    }


def expected_seed_events(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    out = [("context.surface.created", "surface:abi-surface")]
    out += [("context.item.added", f"item:{i}")
            for i in bundle["context_surfaces"][0]["item_refs"]]
    out += [("context.selection.started", "selection:abi-selection"),
            ("context.selection.completed", "selection:abi-selection"),
            ("context.budget.applied", "budget:abi-budget"),
            ("context.assembly.created", "assembly:abi-assembly")]
    for name, rel in (("summary", "context/summary.md"), ("facts", "context/facts.jsonl"),
                      ("decisions", "context/decisions.jsonl"), ("todo", "context/todo.md")):
        out += [("context.compaction.started", f"compaction:abi-compaction-{name}"),
                ("context.summary.created", f"summary:{rel}"),
                ("context.compaction.completed", f"compaction:abi-compaction-{name}")]
    return out


def test_seed_session_maps_to_the_expected_bundle(session: Path,
                                                  tel: CapturedTelemetry) -> None:
    snapshot = emit_session(session, tel.agent_context)
    assert snapshot.breaches == [] and snapshot.warnings == []
    (bundle,) = tel.bundles()
    expected = expected_seed_bundle(session)
    assert records(bundle) == expected
    assert events(bundle) == expected_seed_events(expected)
    assert {e["occurred_at"] for e in bundle["context_events"]} == {PACK_AT}
    assert bundle["rebuild"] == {"status": "complete", "expected_spans": 8,
                                 "received_spans": 8, "dropped_events": 0,
                                 "dropped_attributes": 0}
    refs = bundle["context_envelope"]["telemetry_refs"]
    assert [r["span_name"] for r in refs] == [
        "context.envelope", "context.surface", "context.selection", "context.budget",
        "context.assembly", "context.compaction", "context.compaction", "context.compaction",
        "context.compaction"]
    assert len({r["trace_id"] for r in refs}) == 1


def test_the_library_bundle_is_the_rebuilt_one(session: Path, tel: CapturedTelemetry) -> None:
    """session_bundle() gives the records the spans carry (derived refs aside)."""
    bundle = session_bundle(session)
    assert isinstance(bundle, Bundle)
    expected = expected_seed_bundle(session)
    got = bundle.to_dict()
    titles = {i["item_id"]: i.pop("title") for i in got["context_items"] if "title" in i}
    assert titles == {"context/swap/chunk/sha256-abc": "initial design discussion",
                      "context/swap/chunk/sha256-def": "full test log from failed build",
                      "/work/DESIGN.md": "current design draft"}  # content: spans only on opt-in
    assert got["context_items"] == expected["context_items"]
    assert got["context_selections"] == expected["context_selections"]
    assert got["context_budgets"] == expected["context_budgets"]
    assert got["context_compactions"] == expected["context_compactions"]
    assert [b.to_dict() for b in bundle.context_assemblies[0].ordered_blocks] == \
        expected["context_assemblies"][0]["ordered_blocks"]
    # the summaries carry the derived files' text; it reaches spans only under content capture
    assert bundle.context_summaries[0].content == (session / "context/summary.md").read_text()


def test_content_capture_adds_titles_and_summary_text(session: Path) -> None:
    tel = CapturedTelemetry(capture_content=True)
    try:
        emit_session(session, tel.agent_context)
        (bundle,) = tel.bundles()
    finally:
        tel.shutdown()
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["context/swap/chunk/sha256-abc"]["title"] == "initial design discussion"
    assert items["context/swap/chunk/sha256-def"]["title"] == "full test log from failed build"
    assert items["/work/DESIGN.md"]["title"] == "current design draft"
    texts = {s["summary_id"]: s["content"] for s in bundle["context_summaries"]}
    assert texts["context/facts.jsonl"] == (session / "context/facts.jsonl").read_text()


def test_budget_overflows_when_the_pack_exceeds_context_budget(session: Path,
                                                               tel: CapturedTelemetry) -> None:
    (session / "context/budget").write_text("tokens=8000\nreserved_tokens=500\n")
    emit_session(session, tel.agent_context)
    (bundle,) = tel.bundles()
    assert bundle["context_budgets"][0] | {"created_at": None, "completed_at": None} == {
        "budget_id": "abi-budget", "target": "model", "max_tokens": 8000,
        "reserved_tokens": 500, "actual_tokens": 10900, "actual_items": 5, "overflow": True,
        "overflow_tokens": 10900 + 500 - 8000, "utilization": 10900 / 8000,
        "created_at": None, "completed_at": None}


def test_without_context_budget_the_pack_budget_tokens_is_the_budget(
        session: Path, tel: CapturedTelemetry) -> None:
    (session / "context/budget").unlink()
    bundle = session_bundle(session)
    assert bundle is not None
    assert bundle.context_budgets[0].max_tokens == 32000


def test_agent_and_session_come_from_the_path_when_the_pack_omits_them(tmp_path: Path) -> None:
    session = copy_session(tmp_path, name="s-42")
    pack = session / "context/pack.json"
    pack.write_text('{"items": [{"kind": "system", "source": "context/pinned/system.md",'
                    ' "tokens": 10}]}')
    snapshot = read_session(session)
    assert (snapshot.agent, snapshot.session) == ("coder", "s-42")
    assert snapshot.bundle is not None
    env = snapshot.bundle.context_envelope
    assert env.actor_refs == ["agent:coder"] and env.runtime_refs == ["session:s-42"]
    assert env.context_id.startswith("abi:coder/s-42/pack-")


def test_a_swapped_chunk_back_in_the_pack_is_selected_not_omitted(session: Path) -> None:
    pack = session / "context/pack.json"
    pack.write_text('{"budget_tokens": 32000, "items": ['
                    '{"kind": "swap", "source": "context/swap/chunk/sha256-abc", "tokens": 500},'
                    '{"kind": "tool_output", "source": "tool:test-output-2", "tokens": 20000}]}')
    bundle = session_bundle(session)
    assert bundle is not None
    (sel,) = bundle.context_selections
    assert sel.selected_item_refs == ["context/swap/chunk/sha256-abc", "tool:test-output-2"]
    omitted = {o.item_id: o.reason for o in sel.omitted_item_refs}
    # the selected copy of sha256-def is the canonical one: test-output-1 is the duplicate now
    assert omitted == {"context/swap/chunk/sha256-def": "budget",
                       "context/swap/chunk/old-design": "duplicate_coverage",
                       "tool:test-output-1": "duplicate_coverage"}
