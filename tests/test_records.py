"""Records: the spec's fields and enums, validated construction, JSON in and out."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import orjson
import pytest

from otel_agent_context import (
    Bundle,
    ContextBudget,
    ContextEnvelope,
    ContextItem,
    ContextSelection,
    MissingContext,
    RecordError,
    bundle_json_schema,
    records_json_schema,
)
from otel_agent_context._enums import (
    CompactionMethod,
    ContentMode,
    ContextKind,
    EventClass,
    InjectionPoint,
    Lifecycle,
    OverflowStrategy,
    RedactionState,
    Scope,
    Severity,
    Visibility,
)
from otel_agent_context._records import ns_to_rfc3339, rfc3339_to_ns

# The standard's seed texts: ../shared/seeds beside the checkout when it is there, else the
# copies of the two this file reads (tests/fixtures/seeds, byte-identical), for a lone clone.
_SHARED_SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
SEEDS = (_SHARED_SEEDS if _SHARED_SEEDS.is_dir()
         else Path(__file__).resolve().parent / "fixtures" / "seeds")


def test_invalid_enum_fails_at_construction_naming_the_field() -> None:
    with pytest.raises(RecordError, match=r"ContextItem.context_kind: 'memo' is not one of"):
        ContextItem(item_id="a", context_kind="memo")
    with pytest.raises(RecordError, match=r"ContextBudget.max_tokens: expected an integer"):
        ContextBudget(budget_id="b", max_tokens="lots")
    with pytest.raises(RecordError, match=r"ContextEnvelope.created_at: not an RFC 3339"):
        ContextEnvelope(context_id="c", scope="turn", created_at="yesterday")
    with pytest.raises(RecordError, match=r"MissingContext.blocked_actions: expected a list"):
        MissingContext(missing_id="m", blocked_actions="refund")


def test_strings_become_enum_members_and_json_round_trips() -> None:
    sel = ContextSelection(selection_id="s",
                           omitted_item_refs=[{"item_id": "a", "reason": "budget"}],
                           created_at="2026-05-04T09:31:42+02:00")
    assert sel.omitted_item_refs[0].reason == "budget"
    assert sel.created_at == "2026-05-04T07:31:42Z"
    assert ContextSelection.from_json(sel.to_json()) == sel
    with pytest.raises(RecordError, match=r"\$.omitted_item_refs\[0\].reason"):
        ContextSelection.from_json(b'{"selection_id":"s","omitted_item_refs":'
                                   b'[{"item_id":"a","reason":"whim"}]}')


def test_timestamps_keep_nanoseconds() -> None:
    ns = 1_790_000_000_123_456_789
    assert rfc3339_to_ns(ns_to_rfc3339(ns)) == ns
    assert ns_to_rfc3339(1_790_000_000_000_000_000) == "2026-09-21T14:13:20Z"


def test_enum_values_are_exactly_the_seeds() -> None:
    # The seeds list enum values run together ("inlinerefsummary..."): each value must occur.
    seeds = (SEEDS / "000_1479bbba01bf4899.txt").read_text() + (
        SEEDS / "002_279e38e8b462f1f9.txt").read_text()
    for enum_cls in (ContextKind, InjectionPoint, OverflowStrategy, ContentMode, Scope,
                     Lifecycle, Visibility, CompactionMethod, Severity, RedactionState,
                     EventClass):
        values = [m.value for m in enum_cls]
        as_list = "".join(values) in re.sub(r",\s*(or\s+)?|\n", "", seeds)
        as_table = all(f"\n{v} |" in seeds for v in values)
        assert as_list or as_table, enum_cls


def test_schemas_validate_a_rebuilt_bundle_and_reject_a_bad_one() -> None:
    bundle = Bundle(context_envelope=ContextEnvelope(context_id="c", scope="turn"),
                    context_items=[ContextItem(item_id="a", context_kind="tool_result")])
    doc = orjson.loads(bundle.to_json())
    jsonschema.validate(doc, bundle_json_schema())
    doc["context_items"][0]["context_kind"] = "memo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, bundle_json_schema())
    assert {"ContextEnvelope", "ContextSurface", "ContextItem", "ContextSourceRef",
            "ContextSelection", "ContextBudget", "ContextWindow", "ContextAssembly",
            "ContextInjection", "ContextCompaction", "ContextSummary", "MissingContext",
            "ContextEvent", "Bundle"} <= set(records_json_schema()["$defs"])


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "otel_agent_context", *args], input=stdin,
                          capture_output=True, timeout=60, check=False)


def test_cli_schema_and_validate(tmp_path) -> None:
    out = _cli("schema")
    assert out.returncode == 0 and orjson.loads(out.stdout)["title"] == "Agent Context bundle"
    good = Bundle(context_envelope=ContextEnvelope(context_id="c", scope="turn")).to_json()
    bad = orjson.loads(good)
    bad["context_envelope"]["scope"] = "galaxy"
    path = tmp_path / "b.jsonl"
    path.write_bytes(good + b"\n" + orjson.dumps(bad) + b"\n\n{oops\n")
    out = _cli("validate", str(path))
    assert out.returncode == 1
    lines = out.stdout.decode().splitlines()
    assert lines == [f"{path}:2: $.context_envelope.scope: 'galaxy' is not one of "
                     "['custom', 'handoff', 'review', 'session', 'task', 'tool_invocation', "
                     "'turn']", f"{path}:4: $: not JSON: unexpected character, expected a "
                     "string key: line 1 column 2 (char 1)"]
    assert _cli("validate", "-", stdin=good + b"\n").returncode == 0
    assert _cli("validate", str(tmp_path / "none.jsonl")).returncode == 2
