"""Probe (not the store's code): could SQLite build the child rows from the bundle's JSON
itself (``json_each``), so that the Python work per bundle shrinks to the envelope row?

    python benchmarks/probes/store_json_rows.py [--rounds 5]

On ``processor_bench``'s ctx20 bundles (seven budgets an envelope) and sel100 bundles (a
hundred items a selection), interleaved in rounds, in fresh SQLite files with fsync on:
``store.write`` as it is, against a variant that inserts the envelope row from Python and the
budgets, window segments, blocks and item rows with one ``INSERT ... SELECT ... FROM
json_each(?)`` per table and batch. The variant's item rows are simplified (state from the
selection's selected and omitted lists only): it bounds the gain, it is not a replacement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans  # noqa: E402

from otel_agent_context._store import open_store  # noqa: E402
from otel_agent_context._store._rows import COLUMNS, bundle_rows  # noqa: E402

JSON_ROWS = {
    "budgets": """
        INSERT INTO budgets SELECT ?1, ?2, COALESCE(b.value ->> 'budget_id', ''),
          b.value ->> 'target', b.value ->> 'max_tokens', b.value ->> 'reserved_tokens',
          b.value ->> 'actual_tokens', b.value ->> 'utilization',
          COALESCE(b.value ->> 'overflow', 0), b.value ->> 'overflow_tokens',
          b.value ->> 'overflow_strategy',
          COALESCE(json_array_length(b.value, '$.truncation_records'), 0)
        FROM json_each(?3, '$.context_budgets') b""",
    "window_segments": """
        INSERT INTO window_segments SELECT ?1, ?2, COALESCE(b.value ->> 'budget_id', ''),
          s.key, s.value ->> 'segment', s.value ->> 'reserved_tokens', s.value ->> 'used_tokens'
        FROM json_each(?3, '$.context_budgets') b, json_each(b.value, '$.window_segments') s""",
    "blocks": """
        INSERT INTO blocks SELECT ?1, ?2, COALESCE(a.value ->> 'assembly_id', ''),
          COALESCE(k.value ->> 'index', k.key), k.value ->> 'item_id',
          k.value ->> 'context_kind', k.value ->> 'tokens', k.value ->> 'injection_point'
        FROM json_each(?3, '$.context_assemblies') a, json_each(a.value, '$.ordered_blocks') k""",
    "items": """
        INSERT OR REPLACE INTO items (trace_id, context_id, item_id, context_kind, state, tokens,
          truncated, compacted, injected, digest)
        SELECT ?1, ?2, i.value ->> 'item_id', i.value ->> 'context_kind', 'surfaced',
          i.value ->> 'token_estimate', 0, 0, 0, i.value ->> 'digest'
        FROM json_each(?3, '$.context_items') i WHERE i.value ->> 'item_id' IS NOT NULL""",
    "omitted": """
        INSERT OR REPLACE INTO items (trace_id, context_id, item_id, state, omit_reason,
          omit_detail, score, truncated, compacted, injected)
        SELECT ?1, ?2, o.value ->> 'item_id', 'omitted', o.value ->> 'reason',
          o.value ->> 'detail', o.value ->> 'score', 0, 0, 0
        FROM json_each(?3, '$.context_selections') s, json_each(s.value, '$.omitted_item_refs') o
        WHERE o.value ->> 'item_id' IS NOT NULL""",
}


def write_with_json(store, bundles, lines) -> None:
    db = store._db
    envelope_rows = []
    child = []
    for bundle, line in zip(bundles, lines, strict=True):
        rows = bundle_rows({"context_envelope": bundle["context_envelope"],
                            "rebuild": bundle.get("rebuild")})  # the envelope row only
        (row,) = rows["envelopes"]
        envelope_rows.append(store._adapt("envelopes", row[:-1] + (None,))[:-1]
                             + (line.rstrip(b"\n").decode(), time.time_ns()))
        child.append((row[0], row[1], line))
    db.begin()
    db.executemany(store._insert["envelopes"], envelope_rows)
    for sql in JSON_ROWS.values():
        db.executemany(sql, child)
    db.commit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for name, make, per in (("ctx20", ctx20_spans, 512), ("sel100", sel100_spans, 64)):
            pipeline = _pipeline(tmp / name, **{"store.url": "off"})
            for i in range(8):
                pipeline.ingest(_request(i + 1, make, per), "bench")
            pipeline.emit_pending()
            pipeline.close(timeout=5)
            lines = (tmp / name / "bundles-000001.jsonl").read_bytes().splitlines(keepends=True)
            bundles = [json.loads(line) for line in lines]
            now_us, json_us = [], []
            for r in range(args.rounds):
                for variant in (("now", "json") if r % 2 == 0 else ("json", "now")):
                    store = open_store(str(tmp / f"{name}-{r}-{variant}.db"))
                    start = time.perf_counter()
                    for i in range(0, len(bundles), 256):
                        if variant == "now":
                            store.write(bundles[i:i + 256], lines[i:i + 256])
                        else:
                            write_with_json(store, bundles[i:i + 256], lines[i:i + 256])
                    elapsed = (time.perf_counter() - start) / len(bundles) * 1e6
                    (now_us if variant == "now" else json_us).append(elapsed)
                    store.close()
            print(f"{name}: {len(bundles)} bundles; store.write {statistics.median(now_us):.0f} us "
                  f"a bundle, rows from the JSON in SQLite {statistics.median(json_us):.0f} us "
                  f"({statistics.median(now_us) / statistics.median(json_us):.2f}x)")
    assert COLUMNS  # the schema the probe writes into is the store's own
    return 0


if __name__ == "__main__":
    sys.exit(main())
