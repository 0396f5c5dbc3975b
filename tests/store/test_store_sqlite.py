"""The bundle store on SQLite (the embedded default): the demo's bundles as rows, idempotent
writes, migrations, retention, odd input, and the session timeline with its diffs."""

from __future__ import annotations

import copy
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import store_expect as X

from otel_agent_context._store import StoreError, open_store
from otel_agent_context._store._schema import SCHEMA_VERSION
from otel_agent_context._store._session import (
    EnvelopeFilter,
    conversations,
    diff,
    dropped,
    envelope,
    envelopes,
    session,
)

TABLES = ("envelopes", "items", "blocks", "budgets", "window_segments", "compactions",
          "missing_context")


def counts(store: Any) -> dict[str, int]:
    return {t: store.rows(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"] for t in TABLES}


@pytest.fixture
def store(demo_out: Path, tmp_path: Path) -> Any:
    """A copy of the store ``demo`` filled (tests may write to it)."""
    shutil.copy(demo_out / "context.db", tmp_path / "context.db")
    with open_store(str(tmp_path / "context.db")) as opened:
        yield opened


def test_the_demo_fills_every_table_from_its_bundles(store: Any, demo_bundles: list) -> None:
    rows = store.rows("SELECT trace_id, context_id FROM envelopes")
    assert {(r["trace_id"], r["context_id"]) for r in rows} == {X.key(b) for b in demo_bundles}
    assert len(rows) == len(demo_bundles)
    for bundle in demo_bundles:
        trace_id, context_id = X.key(bundle)
        items = store.rows("SELECT * FROM items WHERE trace_id = ? AND context_id = ?",
                           [trace_id, context_id])
        by_id = {i["item_id"]: i for i in items}
        assert {(i["item_id"], i["omit_reason"]) for i in items
                if i["state"] == "omitted"} == X.omitted(bundle)
        assert {i["item_id"] for i in items if i["state"] == "selected"} == X.selected(bundle)
        assert {i for i, row in by_id.items() if row["injected"]} == set(X.window(bundle))
        assert {i: (row["tokens"], row["tokens_after_truncation"]) for i, row in by_id.items()
                if row["truncated"]} == X.truncated(bundle)
        assert {i for i, row in by_id.items() if row["compacted"]} == X.compacted(bundle)
        blocks = store.rows("SELECT context_kind, tokens FROM blocks WHERE trace_id = ? AND "
                            "context_id = ?", [trace_id, context_id])
        by_kind: dict[str, int] = {}
        for block in blocks:
            by_kind[block["context_kind"]] = by_kind.get(block["context_kind"], 0) + block["tokens"]
        assert by_kind == X.tokens_by_kind(bundle)
        env = store.rows("SELECT * FROM envelopes WHERE context_id = ?", [context_id])[0]
        budget = bundle["context_budgets"][0]
        [budget_row] = store.rows("SELECT * FROM budgets WHERE context_id = ?", [context_id])
        assert budget_row["truncation_count"] == len(budget.get("truncation_records", []))
        assert isinstance(budget_row["truncation_count"], int)
        assert budget_row["max_tokens"] == budget["max_tokens"]
        assert budget_row["overflow_tokens"] == budget.get("overflow_tokens")
        assert env["window_max_tokens"] == budget["max_tokens"]
        assert env["window_used_tokens"] == budget["actual_tokens"]
        assert bool(env["overflow"]) == budget["overflow"]
        assert env["conversation_id"] == X.conversation(bundle)
        assert env["omitted_count"] == len(X.omitted(bundle))
        assert env["status"] == bundle["rebuild"]["status"]
        missing = store.rows("SELECT * FROM missing_context WHERE context_id = ?", [context_id])
        assert {m["missing_id"] for m in missing} == {
            m["missing_id"] for m in bundle.get("missing_context", [])}
        compactions = store.rows("SELECT * FROM compactions WHERE context_id = ?", [context_id])
        assert {u for c in compactions for u in c["uncovered_sources"]} == X.uncovered(bundle)
        assert envelope(store, context_id) == bundle  # the full record, unchanged
    # the demo has each thing the page must show at least once
    assert counts(store)["compactions"] >= 1 and counts(store)["missing_context"] >= 1
    assert any(X.truncated(b) for b in demo_bundles)


def test_writing_again_replaces_rows_and_never_duplicates(store: Any, demo_bundles: list) -> None:
    before = counts(store)
    assert store.write(demo_bundles) == len(demo_bundles)
    assert store.write(demo_bundles[:3]) == 3
    assert counts(store) == before
    # a bundle written again with fewer records (a late rebuild) keeps only the new rows
    changed = copy.deepcopy(demo_bundles[0])
    dropped_item = changed["context_selections"][0]["omitted_item_refs"].pop()
    store.write([changed])
    trace_id, context_id = X.key(changed)
    states = store.rows("SELECT state FROM items WHERE context_id = ? AND item_id = ?",
                        [context_id, dropped_item["item_id"]])
    assert [s["state"] for s in states] != ["omitted"]
    assert counts(store)["envelopes"] == before["envelopes"]


def test_schema_is_versioned_and_a_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with open_store(str(path)) as fresh:
        assert fresh.schema_version == SCHEMA_VERSION
    with open_store(f"sqlite:///{path}") as again:  # reopening migrates nothing
        assert again.rows("SELECT COUNT(*) AS n FROM schema_version")[0]["n"] == SCHEMA_VERSION
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
    with pytest.raises(StoreError, match="newer than this otel-agent-context"):
        open_store(str(path))


def test_unusable_locations_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a directory"):
        open_store(str(tmp_path / "missing-dir" / "x.db"))
    with pytest.raises(StoreError, match="no SQLite file"):
        open_store("sqlite:///")
    not_a_db = tmp_path / "junk.db"
    not_a_db.write_bytes(b"this is not a database file at all" * 100)
    with pytest.raises(StoreError):
        open_store(str(not_a_db))


def test_retention_prunes_old_envelopes_from_every_table(store: Any,
                                                         demo_bundles: list) -> None:
    old = copy.deepcopy(demo_bundles[0])
    old["context_envelope"]["context_id"] = "ctx_old"
    old["context_envelope"]["created_at"] = "2020-01-01T00:00:00Z"
    store.write([old])
    before = counts(store)
    assert store.prune(1_600_000_000 * 10**9) == 1  # 2020-09-13: only the old one
    after = counts(store)
    assert after["envelopes"] == before["envelopes"] - 1
    assert not store.rows("SELECT 1 FROM items WHERE context_id = 'ctx_old'")
    assert not store.rows("SELECT 1 FROM blocks WHERE context_id = 'ctx_old'")
    assert after["items"] < before["items"]


def test_off_spec_bundles_are_stored_without_failing(tmp_path: Path) -> None:
    odd = [
        {"context_envelope": {"context_id": "bare", "telemetry_refs": [{"trace_id": "t1"}]}},
        {"context_envelope": {"context_id": "types", "telemetry_refs": [{"trace_id": "t2"}],
                              "created_at": "yesterday", "metadata": "not a map"},
         "context_items": [{"item_id": "a", "token_estimate": "12"}, "junk", {"no": "id"}],
         "context_budgets": [{"budget_id": "b", "max_tokens": float("nan"),
                              "utilization": float("inf"), "overflow": "yes",
                              "truncation_records": [{"item_id": "a", "tokens_after": 1e400}],
                              "window_segments": [{}, None]}],
         "context_selections": [{"omitted_item_refs": [{"item_id": "z", "score": "high"},
                                                       {"reason": "budget"}],
                                 "selected_item_refs": [None, 3, "a"]}],
         "context_assemblies": [{"ordered_blocks": [{"item_id": "a", "tokens": -5}, {}]}],
         "missing_context": [{"severity": "blocking"}, {"missing_id": "m", "blocked_actions": 7}],
         "rebuild": {"status": "partial", "partial_reasons": ["x", 1]}},
    ]
    with open_store(str(tmp_path / "odd.db")) as store:
        assert store.write(odd) == 2
        types = store.rows("SELECT * FROM envelopes WHERE context_id = 'types'")[0]
        assert types["created_ns"] is None and types["window_max_tokens"] is None
        assert types["utilization"] is None and not types["overflow"]
        assert types["partial_reasons"] == ["x"]
        item = store.rows("SELECT * FROM items WHERE context_id = 'types' AND item_id = 'a'")[0]
        assert item["tokens"] is None and item["truncated"] and item["state"] == "selected"
        assert store.rows("SELECT score FROM items WHERE item_id = 'z'")[0]["score"] is None
        assert envelope(store, "bare")["context_envelope"]["context_id"] == "bare"
        assert store.write([]) == 0


def test_session_is_every_turn_in_order_with_what_changed(store: Any, demo_bundles: list) -> None:
    ordered = X.in_time_order(demo_bundles)
    conv = X.conversation(ordered[0])
    turns = session(store, conv, trace_url_template="http://jaeger/trace/{trace_id}")
    assert [t.envelope["context_id"] for t in turns] == [X.key(b)[1] for b in ordered]
    for number, (turn, bundle) in enumerate(zip(turns, ordered, strict=True), 1):
        assert turn.number == number
        assert turn.window == X.window(bundle)
        assert turn.by_kind == {k: v for k, v in X.tokens_by_kind(bundle).items()}
        assert {(o["item_id"], o["reason"]) for o in turn.omitted} == X.omitted(bundle)
        assert {t["item_id"]: (t["tokens_before"], t["tokens_after"])
                for t in turn.truncated} == X.truncated(bundle)
        assert {s for c in turn.compactions for s in c["sources"]} == X.compacted(bundle)
        assert turn.trace_url == f"http://jaeger/trace/{X.key(bundle)[0]}"
        assert turn.not_injected == [i for s in bundle.get("context_selections", [])
                                     for i in s.get("not_injected_item_refs", [])]
        if number == 1:
            assert turn.previous is None and turn.added == X.window(bundle)
            continue
        before, now = X.window(ordered[number - 2]), X.window(bundle)
        assert turn.previous == number - 1
        assert turn.added == [i for i in now if i not in before]
        assert turn.removed == [i for i in before if i not in now]
    assert any(t.not_injected for t in turns)  # the demo leaves a document out now and then
    assert session(store, "no-such-conversation") == []


def test_diff_between_any_two_turns_says_why_items_left(store: Any, demo_bundles: list) -> None:
    ordered = X.in_time_order(demo_bundles)
    turns = session(store, X.conversation(ordered[0]))
    compacting = next(n for n, b in enumerate(ordered, 1) if X.compacted(b))
    change = diff(turns, 1, compacting)
    first, last = X.window(ordered[0]), X.window(ordered[compacting - 1])
    assert change["added"] == [i for i in last if i not in first]
    assert [r["item_id"] for r in change["removed"]] == [i for i in first if i not in last]
    omitted_now = dict(X.omitted(ordered[compacting - 1]))
    for removed in change["removed"]:
        if removed["item_id"] in omitted_now:
            assert removed["why"] == "omitted"
            assert removed["reason"] == omitted_now[removed["item_id"]]
    with pytest.raises(KeyError):
        diff(turns, 1, len(turns) + 1)


def test_dropped_conversations_and_filters_answer_from_the_rows(store: Any,
                                                                 demo_bundles: list) -> None:
    ordered = X.in_time_order(demo_bundles)
    item_id, reason = sorted(X.omitted(ordered[0]))[0]
    expected = [n for n, b in enumerate(ordered, 1) if (item_id, reason) in X.omitted(b)]
    rows = dropped(store, item_id, reason=reason)
    assert [r["turn"] for r in rows] == expected
    assert all(r["omit_reason"] == reason for r in rows)
    [conv] = conversations(store)
    assert conv["turns"] == len(ordered)
    assert conv["overflows"] == sum(b["context_budgets"][0]["overflow"] for b in ordered)
    assert conv["blocking_missing"] == sum(
        1 for b in ordered for m in b.get("missing_context", []) if m["severity"] == "blocking")
    overflowed = envelopes(store, EnvelopeFilter(overflow=True))
    assert {e["context_id"] for e in overflowed} == {
        X.key(b)[1] for b in ordered if b["context_budgets"][0]["overflow"]}
    by_reason = envelopes(store, EnvelopeFilter(omission_reason="privacy_risk", overflow=False))
    assert {e["context_id"] for e in by_reason} == {
        X.key(b)[1] for b in ordered if not b["context_budgets"][0]["overflow"]
        and any(r == "privacy_risk" for _, r in X.omitted(b))}
    blocking = envelopes(store, EnvelopeFilter(blocking=True, agent="support-agent"))
    assert all(e["blocking_missing_count"] > 0 for e in blocking) and blocking
    assert envelopes(store, EnvelopeFilter(agent="nobody")) == []


def test_serve_settings_for_the_store(tmp_path: Path) -> None:
    from otel_agent_context.exceptions import ConfigError
    from otel_agent_context.processor import ProcessorConfig

    base = {"output.dir": str(tmp_path / "out")}
    default = ProcessorConfig.from_values(base)
    assert default.store_url == f"sqlite:///{(tmp_path / 'out' / 'context.db').resolve()}"
    assert default.store_retention is None and default.ui is None
    week = ProcessorConfig.from_values({**base, "store.retention": "7d", "store.url": "off"})
    assert week.store_retention == 7 * 86400 and week.store_url is None
    assert ProcessorConfig.from_values({**base, "store.retention": 90}).store_retention == 90
    cores = len(os.sched_getaffinity(0))
    assert default.store_writer == ("process" if cores >= 2 else "thread")  # auto
    assert ProcessorConfig.from_values({**base, "store.writer": "thread"}).store_writer == "thread"
    assert ProcessorConfig.from_values({**base, "store.writer": "process"}).store_writer == \
        "process"
    for key, value in (("store.retention", "soon"), ("store.retention", "-1h"),
                       ("store.url", "mysql://x"), ("store.url", 5),
                       ("store.writer", "fork")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            ProcessorConfig.from_values({**base, key: value})


def test_the_store_writer_follows_the_cores_it_may_use(tmp_path: Path, monkeypatch) -> None:
    """auto: a child process when the processor may run on two or more cores (no GIL shared
    with the emitter), a thread on one (where the child only adds its own decoding)."""
    from otel_agent_context.processor import ProcessorConfig

    base = {"output.dir": str(tmp_path / "out")}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert ProcessorConfig.from_values(base).store_writer == "thread"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert ProcessorConfig.from_values(base).store_writer == "process"
    assert ProcessorConfig.from_values({**base, "store.writer": "thread"}).store_writer == "thread"


def test_the_sink_prunes_by_its_retention(tmp_path: Path, demo_bundles: list) -> None:
    from otel_agent_context.processor._store_sink import StoreSink

    path = tmp_path / "kept.db"
    old = copy.deepcopy(demo_bundles[0])
    old["context_envelope"]["created_at"] = "2020-01-01T00:00:00Z"
    with open_store(str(path)) as store:
        store.write([old, demo_bundles[1]])
    sink = StoreSink(f"sqlite:///{path}", retention=86400.0)
    sink.open()  # prunes at start, then at most once a minute
    try:
        ids = [r["context_id"] for r in sink.opened.rows("SELECT context_id FROM envelopes")]
        assert ids == [X.key(demo_bundles[1])[1]]
    finally:
        sink.close()
