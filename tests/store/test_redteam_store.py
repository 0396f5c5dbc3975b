"""Red team: hostile bundles must not stop the store (and with it the whole processor: the
emitter retries a failing store batch until it succeeds), nor leave rows of two versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from otel_agent_context._store import open_store

INT64_MAX = 2**63 - 1


def _bundle(context_id: str, **extra: Any) -> dict[str, Any]:
    return {"context_envelope": {"context_id": context_id,
                                 "telemetry_refs": [{"trace_id": "t-" + context_id}],
                                 "metadata": {"gen_ai.conversation.id": "conv"},
                                 "created_at": "2026-01-01T00:00:00Z"},
            **extra}


def _poison() -> list[dict[str, Any]]:
    """Envelopes the processor can really build from OTLP (ints within 64 bits each)."""
    return [
        # two blocks at the int64 limit: their sum (window use, tokens by kind) is not
        _bundle("sum", context_assemblies=[{"assembly_id": "a", "ordered_blocks": [
            {"index": 0, "item_id": "x", "tokens": INT64_MAX, "context_kind": "memory"},
            {"index": 1, "item_id": "y", "tokens": INT64_MAX, "context_kind": "memory"}]}]),
        # overflow tokens of two budgets, summed on the envelope row
        _bundle("budgets", context_budgets=[
            {"budget_id": "b1", "overflow": True, "overflow_tokens": INT64_MAX},
            {"budget_id": "b2", "overflow": True, "overflow_tokens": INT64_MAX}]),
        # a rank beyond 32 bits (an INTEGER column in PostgreSQL)
        _bundle("rank", context_selections=[{"selection_id": "s", "candidate_count": 2**40,
                                             "ranking_signals": [{"item_id": "x",
                                                                  "rank": 2**40}]}]),
        # a span starting after 2262 (OTLP times are unsigned): nanoseconds beyond BIGINT
        {**_bundle("late"), "context_envelope": {
            **_bundle("late")["context_envelope"], "created_at": "2500-01-01T00:00:00Z"}},
        # NUL characters (OTLP strings may carry them)
        _bundle("nul\x00id", context_items=[{"item_id": "i\x00", "context_kind": "k\x00"}],
                missing_context=[{"missing_id": "m", "needed_for": "a\x00b",
                                  "blocked_actions": ["x\x00"]}]),
    ]


def _check_store(store: Any) -> None:
    good = [_bundle("good-1"), _bundle("good-2")]
    # one poisonous envelope must not keep the others (the whole batch) out forever
    for poison in _poison():
        store.write([good[0], poison, good[1]])
    stored = {r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")}
    assert {"good-1", "good-2"} <= stored
    # and each of them is stored (with what cannot be represented made NULL or replaced)
    assert {"sum", "budgets", "rank", "late"} <= stored, stored
    late = store.rows("SELECT created_ns, created_at FROM envelopes WHERE context_id = 'late'")
    assert late[0]["created_ns"] is None and late[0]["created_at"].startswith("2500")
    assert any(c.startswith("nul") for c in stored), stored
    row = store.rows("SELECT window_used_tokens FROM envelopes WHERE context_id = 'sum'")[0]
    assert row["window_used_tokens"] is None or row["window_used_tokens"] <= INT64_MAX


def test_hostile_numbers_and_nul_do_not_poison_a_sqlite_batch(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "s.db")) as store:
        _check_store(store)


def test_hostile_numbers_and_nul_do_not_poison_a_postgresql_batch(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        _check_store(store)


def test_the_same_envelope_twice_in_one_batch_keeps_only_the_last_rows(tmp_path: Path) -> None:
    first = _bundle("k", context_items=[{"item_id": "a"}, {"item_id": "b"}])
    second = _bundle("k", context_items=[{"item_id": "a"}])
    with open_store(str(tmp_path / "s.db")) as store:
        store.write([first, second])
        items = {r["item_id"] for r in store.rows("SELECT item_id FROM items")}
        assert items == {"a"}, "rows of an older version of the envelope were kept"


