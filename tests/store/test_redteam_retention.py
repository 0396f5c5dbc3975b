"""Red team: the retention cannot be dodged by a client that dates its spans in the future
(created_at comes from the span's start time, which the sender chooses)."""

from __future__ import annotations

import time
from pathlib import Path

from otel_agent_context._store import open_store


def _bundle(context_id: str, created_at: str) -> dict:
    return {"context_envelope": {"context_id": context_id,
                                 "telemetry_refs": [{"trace_id": "t-" + context_id}],
                                 "created_at": created_at},
            "context_items": [{"item_id": "i"}]}


def test_a_future_dated_envelope_is_pruned_by_when_it_was_stored(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "s.db")) as store:
        store.write([_bundle("future", "2200-01-01T00:00:00Z"),
                     _bundle("recent", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))])
        time.sleep(0.05)
        # a retention that keeps nothing stored before now
        removed = store.prune(time.time_ns())
        left = {r["context_id"] for r in store.rows("SELECT context_id FROM envelopes")}
        assert "future" not in left, "a future created_at kept the envelope past its retention"
        assert removed == 2 and not store.rows("SELECT * FROM items")
