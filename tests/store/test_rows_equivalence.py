"""``bundle_rows`` (rewritten for speed) builds exactly the rows its straightforward first
version built (``rows_reference.py``): on the demo's bundles, on bundles with every section,
on the benchmark's, and on off-spec bundles (wrong types, odd ids, values out of range)."""

from __future__ import annotations

import copy
import math
import random
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rows_reference import _ns as reference_ns  # noqa: E402
from rows_reference import reference_rows  # noqa: E402

from otel_agent_context._store._rows import COLUMNS, SECTIONS, _ns, bundle_rows

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


def _identical(new: Any, old: Any) -> bool:
    """Equal with the same types (True is not 1, 1.0 is not 1), NaN equal to NaN, and
    dicts in the same key order (the JSON columns' stored text depends on it)."""
    if type(new) is not type(old):
        return False
    if isinstance(new, dict):
        return list(new) == list(old) and all(_identical(new[k], old[k]) for k in new)
    if isinstance(new, (list, tuple)):
        return len(new) == len(old) and all(map(_identical, new, old))
    if isinstance(new, float) and math.isnan(new):
        return math.isnan(old)
    return bool(new == old)


def _same(bundle: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    new, old = bundle_rows(bundle), reference_rows(bundle)
    assert list(new) == list(old) == list(COLUMNS)
    for table in COLUMNS:
        assert _identical(new[table], old[table]), (table, new[table], old[table])
        assert [len(r) for r in new[table]] == [len(COLUMNS[table])] * len(new[table])
    return new


def full_bundle() -> dict[str, Any]:
    """One bundle with every section the rows read, and each way an item can end."""
    key = {"trace_id": "ab" * 16, "span_id": "cd" * 8}
    return {
        "context_envelope": {
            "context_id": "ctx-full", "scope": "turn", "lifecycle": "injected",
            "created_at": "2026-11-26T07:00:00.123456789Z",
            "completed_at": "2026-11-26T07:00:01Z",
            "metadata": {"gen_ai.conversation.id": "conv-1", "gen_ai.agent.name": "agent",
                         "gen_ai.request.model": "m", "context.parent.id": "ctx-parent"},
            "telemetry_refs": ["not a ref", key, {"trace_id": "ff" * 16}],
        },
        "context_items": [
            {"item_id": f"i{n}", "context_kind": "document_excerpt", "token_estimate": 10 * n,
             "digest": f"sha256:{n:064x}",
             "source_refs": [{"uri": ""}, "x", {"uri": f"kb://doc/{n}"}]}
            for n in range(12)
        ] + [{"item_id": 7}, "not a record", {"context_kind": "no id"}],
        "context_selections": [
            {"selection_id": "s1", "candidate_count": 12,
             "candidate_item_refs": [f"i{n}" for n in range(12)] + ["ghost", 3],
             "selected_item_refs": ["i0", "i1", "i2", "i3", "new-selected"],
             "omitted_item_refs": [
                 {"item_id": "i4", "reason": "budget", "detail": "over", "score": 0.25},
                 {"item_id": "i5", "reason": "", "score": 3},
                 {"item_id": 9, "reason": "duplicate", "score": math.inf},
                 {"reason": "no id"}, "bad"],
             "ranking_signals": [{"item_id": "i4", "rank": 2, "score": 0.9},
                                 {"item_id": "i6", "rank": 2**40, "score": 0.5},
                                 {"item_id": "i0", "rank": 1.0}, {"rank": 3}, 5],
             "not_injected_item_refs": ["i3", 4]},
            {"selection_id": "s2", "candidate_count": "many",
             "candidate_item_refs": ["i0", "i11"], "selected_item_refs": ["i11"],
             "omitted_item_refs": [{"item_id": "i0", "reason": "stale", "score": None}],
             "ranking_signals": [{"item_id": "i11", "rank": True}]},
        ],
        "context_budgets": [
            {"budget_id": "b1", "target": "model", "max_tokens": 8192, "reserved_tokens": 1024,
             "actual_tokens": 9000, "utilization": 1.1, "overflow": True,
             "overflow_tokens": 808, "overflow_strategy": "truncate_middle",
             "truncation_records": [
                 {"item_id": "i1", "tokens_before": 500, "tokens_after": 200},
                 {"item_id": "new-truncated", "tokens_before": 70, "tokens_after": 7.5},
                 {"tokens_before": 1}],
             "window_segments": [{"segment": "system", "reserved_tokens": 100,
                                  "used_tokens": 90}, {"segment": "history"}, "bad"]},
            {"budget_id": "b2", "max_tokens": 2**70, "utilization": math.nan,
             "overflow": "yes", "overflow_tokens": 2**62},
            {"budget_id": "b2", "overflow_tokens": 2**62},
        ],
        "context_compactions": [
            {"compaction_id": "c1", "method": "summary", "trigger": "budget",
             "scope": "history", "coverage": 0.5, "source_count": 3, "tokens_before": 900,
             "tokens_after": 100, "source_item_refs": ["i7", "i8", 5, "new-compacted"],
             "source_coverage": [{"item_id": "i7", "covered": True},
                                 {"item_id": "i8", "covered": False},
                                 {"covered": False}],
             "loss_notes": ["dates", 3], "summary_ref": "sum-1"},
        ],
        "context_assemblies": [
            {"assembly_id": "a1", "ordered_blocks": [
                {"index": 0, "item_id": "i0", "context_kind": "system_prompt", "tokens": 50,
                 "injection_point": "system"},
                {"index": 1, "item_id": "i1", "tokens": 200, "injection_point": "user"},
                {"item_id": "i2", "context_kind": "", "tokens": 2**64},
                {"index": 3, "item_id": "i0", "context_kind": "again", "tokens": 5},
                {"index": 4, "item_id": 42, "tokens": 3.0},
                {"index": 5, "tokens": None, "context_kind": "tool_definition"},
                "bad"]},
            {"assembly_id": "a1", "ordered_blocks": [{"index": 0, "item_id": "new-block"}]},
        ],
        "missing_context": [
            {"missing_id": "m1", "needed_for": "answer", "severity": "blocking",
             "status": "open", "requested_from": "user", "blocked_actions": ["refund", 1]},
            {"missing_id": "m2", "severity": "blocking", "status": "resolved"},
            {"severity": "minor"}],
        "context_windows": [{"window_id": "w"}],
        "context_events": [{"event_class": "x"}],
        "rebuild": {"status": "partial", "partial_reasons": ["timeout", 3]},
    }


def test_demo_bundles_build_the_same_rows(demo_bundles: list[dict[str, Any]]) -> None:
    tables = [_same(bundle) for bundle in demo_bundles]
    # the demo exercises what the comparison is for: omitted, truncated, compacted, blocks
    assert any(t["envelopes"][0][29] for t in tables)  # omitted_items
    assert any(t["envelopes"][0][30] for t in tables)  # truncated_items
    assert any(t["compactions"] for t in tables)
    assert any(t["blocks"] for t in tables)


def test_a_bundle_with_every_section_builds_the_same_rows() -> None:
    rows = _same(full_bundle())
    assert all(rows[table] for table in COLUMNS), "every table gets rows"
    states = {r[2]: r[4] for r in rows["items"]}
    assert {"surfaced", "candidate", "selected", "omitted"} <= set(states.values())


def test_the_benchmarks_bundles_build_the_same_rows(tmp_path: Path) -> None:
    from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans

    for name, make, spans in (("ctx20", ctx20_spans, 64), ("sel100", sel100_spans, 16)):
        pipeline = _pipeline(tmp_path / name)
        pipeline.ingest(_request(1, make, spans), "test")
        assert pipeline.emit_pending() == spans // 8
        pipeline.close(timeout=5)
        for path in (tmp_path / name).glob("bundles-*.jsonl"):
            for line in path.read_bytes().splitlines():
                _same(orjson.loads(line))


def _sections_alone(bundle: dict[str, Any]) -> None:
    """The rows of the bundle's :data:`SECTIONS` alone (what the store's child decodes) are
    the rows of the whole bundle, but for the envelope's ``bundle`` (taken from the line)."""
    whole = bundle_rows(bundle)
    alone = bundle_rows({k: v for k, v in bundle.items() if k in SECTIONS})
    assert alone["envelopes"][0][-1] is not bundle
    alone["envelopes"][0] = (*alone["envelopes"][0][:-1], bundle)
    assert _identical(alone, whole)


def test_the_sections_alone_build_the_same_rows(demo_bundles: list[dict[str, Any]],
                                                tmp_path: Path) -> None:
    from processor_bench import _pipeline, _request, ctx20_spans, sel100_spans

    bundles = [*demo_bundles, full_bundle()]
    for name, make, spans in (("ctx20", ctx20_spans, 64), ("sel100", sel100_spans, 16)):
        pipeline = _pipeline(tmp_path / name)
        pipeline.ingest(_request(1, make, spans), "test")
        pipeline.emit_pending()
        pipeline.close(timeout=5)
        bundles += [orjson.loads(line) for path in (tmp_path / name).glob("bundles-*.jsonl")
                    for line in path.read_bytes().splitlines()]
    # the rows read none of what is left out (else the test above would fail), and what is
    # left out is there to be left out: the windows and events of the benchmark's bundles
    assert any(set(b) - SECTIONS >= {"context_windows", "context_events"} for b in bundles)
    for bundle in bundles:
        _sections_alone(bundle)
    for value in _ODD:  # a section of another type: the same rows either way
        bundle = full_bundle()
        for key in ("context_windows", "context_events", "context_surfaces"):
            bundle[key] = value
        _sections_alone(bundle)


_ODD = (None, "", "x", 0, -1, 1.5, math.nan, 2**63, -(2**63) - 1, True, [], {}, ["i0"],
        {"item_id": "i0"})


@pytest.mark.parametrize("seed", range(4))
def test_off_spec_bundles_build_the_same_rows(seed: int) -> None:
    """Every value of the full bundle, one at a time, replaced by a value of another type."""
    rng = random.Random(seed)
    base = full_bundle()
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for k in keys:
            paths.append((node, k))
            if isinstance(node[k], (dict, list)):
                walk(node[k])

    walk(base)
    tried = 0
    for index in range(len(paths)):
        bundle = copy.deepcopy(base)
        found: list[tuple[Any, Any]] = []
        walk_into = [bundle]
        while walk_into:  # the same positions in the copy, in the same order
            node = walk_into.pop(0)
            keys = node.keys() if isinstance(node, dict) else range(len(node))
            for k in keys:
                found.append((node, k))
            walk_into.extend(node[k] for k in keys if isinstance(node[k], (dict, list)))
        node, k = found[index % len(found)]
        node[k] = rng.choice(_ODD)
        try:
            expected = reference_rows(bundle)
        except (AttributeError, TypeError, KeyError):
            with pytest.raises((AttributeError, TypeError, KeyError)):
                bundle_rows(bundle)
            continue
        assert _identical(bundle_rows(bundle), expected), (index, node, k)
        tried += 1
    assert tried > len(paths) // 2


_TIMES = [
    "2023-11-14T22:13:20Z", "2023-11-14T22:13:20.5Z", "2023-11-14T22:13:20.123456789Z",
    "2023-11-14T22:13:20.1234567890Z", "2023-11-14t22:13:20Z", "2023-11-14 22:13:20.1Z",
    "2023-13-14T22:13:20Z", "2023-02-30T22:13:20.1Z", "2023-11-14T22:13:20.Z",
    "2023-11-14T22:13:20ZZ", "2023-11-14T22:13:20.\u0663Z", "2023-11-14T22:13:20.\u00b2Z",
    "9999-12-31T23:59:59.999999999Z", "0001-01-01T00:00:00Z", "2023-11-14T22:13:20+01:00",
    "2023-11-14T22:13:20.5z", "2023-11-14T22:13:20.5Z\n", "", "Z", "x" * 19 + "Z",
    "2023-11-14T22:13:2a.5Z", "2262-04-11T23:47:16.854775807Z",
    "2262-04-11T23:47:16.854775808Z", "2023-11-14T22:13:20.-5Z", "2023-11-14T22:13:20. 5Z",
    "2023-11-14T22:13:20._5Z", None, 5,
]


@pytest.mark.parametrize("value", _TIMES)
def test_times_parse_as_the_full_parse_does(value: Any) -> None:
    """The cache of whole seconds gives what parsing every time gave (asked twice: the
    second answer comes from the cache)."""
    assert _ns(value) == reference_ns(value)
    assert _ns(value) == reference_ns(value)
