"""Span lookups shared by the LLM instrumentor tests."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from opentelemetry.trace import SpanKind

from otel_agent_context import _semconv as S


def inference_spans(spans: list[Any]) -> list[Any]:
    return [s for s in spans if s.kind == SpanKind.CLIENT]


def one_inference(spans: list[Any]) -> Any:
    found = inference_spans(spans)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def named(spans: list[Any], name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


def events(span: Any, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes) for e in span.events if e.name == name]


def segments(span: Any) -> list[dict[str, Any]]:
    """The window segments folded on an inference span (contract v0.2), one dict each keyed
    like a ``context.window.segment`` event's attributes (-1, "not given", left out)."""
    a = span.attributes
    names = a.get(S.WINDOW_SEGMENT_NAMES, ())
    columns = ((S.WINDOW_ORDER, a.get(S.WINDOW_SEGMENT_ORDERS)),
               (S.WINDOW_RESERVED_TOKENS, a.get(S.WINDOW_SEGMENT_RESERVED_TOKENS)),
               (S.WINDOW_USED_TOKENS, a.get(S.WINDOW_SEGMENT_USED_TOKENS)))
    out = []
    for i, name in enumerate(names):
        row: dict[str, Any] = {S.WINDOW_SEGMENT: name}
        for key, values in columns:
            assert values is not None and len(values) == len(names), (key, values, names)
            if values[i] != -1:
                row[key] = values[i]
        out.append(row)
    return out


#: folded per-block arrays and the block event attribute each element becomes ("" = none)
_BLOCK_COLUMNS = (
    (S.ASSEMBLY_BLOCK_KINDS, S.ITEM_KIND),
    (S.ASSEMBLY_BLOCK_TOKENS, S.BLOCK_TOKENS),
    (S.ASSEMBLY_BLOCK_INJECTION_POINTS, S.INJECTION_POINT),
    (S.ASSEMBLY_BLOCK_DIGESTS, S.BLOCK_DIGEST),
    (S.ASSEMBLY_BLOCK_CONTENT_MODES, S.ITEM_CONTENT_MODE),
    (S.ASSEMBLY_BLOCK_CONTENT_REFS, S.ITEM_CONTENT_REF),
    (S.ASSEMBLY_BLOCK_TOOL_CALL_IDS, S.GEN_AI_TOOL_CALL_ID),
    (S.ASSEMBLY_BLOCK_RESPONSE_IDS, S.GEN_AI_RESPONSE_ID),
    (S.ASSEMBLY_BLOCK_CONTENTS, S.ITEM_CONTENT),
)


def block_rows(span: Any) -> list[dict[str, Any]]:
    """The assembly blocks folded on an inference span (contract v0.2), one dict each keyed
    like a ``context.assembly.block`` event's attributes: index, item id, kind, tokens,
    injection point, digest, source item refs (a tuple) and, where the span has them, content
    mode, content ref, tool call id, response id and content. Empty elements are left out;
    every array must be as long as ``block_item_ids``."""
    a = span.attributes
    ids = list(a.get(S.ASSEMBLY_BLOCK_ITEM_IDS, ()))
    assert a.get(S.ASSEMBLY_BLOCK_COUNT) == len(ids), (a.get(S.ASSEMBLY_BLOCK_COUNT), ids)
    rows: list[dict[str, Any]] = [{S.BLOCK_INDEX: i, S.ITEM_ID: item_id}
                                  for i, item_id in enumerate(ids)]
    for key, field in _BLOCK_COLUMNS:
        values = a.get(key)
        if values is None:
            continue
        assert len(values) == len(ids), (key, values, ids)
        for row, value in zip(rows, values, strict=True):
            if value != "":
                row[field] = value
    counts = a.get(S.ASSEMBLY_BLOCK_SOURCE_COUNTS)
    refs = list(a.get(S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS, ()))
    if counts is not None:
        assert len(counts) == len(ids) and sum(counts) == len(refs), (counts, refs, ids)
        at = 0
        for row, n in zip(rows, counts, strict=True):
            if n:
                row[S.BLOCK_SOURCE_ITEM_REFS] = tuple(refs[at:at + n])
            at += n
    else:
        assert not refs, refs
    return rows


def blocks(spans: list[Any]) -> list[tuple[str, str, str]]:
    """(item id, kind, injection point) of every assembly block of the one inference span,
    in order."""
    return [(b[S.ITEM_ID], b[S.ITEM_KIND], b[S.INJECTION_POINT])
            for b in block_rows(one_inference(spans))]


def injection(span: Any) -> dict[str, Any]:
    """The injection folded on an inference span, keyed like the old
    ``context.injection.applied`` event's attributes."""
    return {k: v for k, v in span.attributes.items() if k.startswith("context.injection.")}


def assert_folded(spans: list[Any]) -> Any:
    """The folded form of one model call: one inference span, no stage spans, no segment,
    block or injection events. Returns the span."""
    span = one_inference(spans)
    assert not named(spans, S.SPAN_BUDGET) and not named(spans, S.SPAN_ASSEMBLY), \
        [s.name for s in spans]
    for s in spans:
        for e in s.events:
            assert e.name not in (S.EVENT_WINDOW_SEGMENT, S.EVENT_ASSEMBLY_BLOCK,
                                  S.EVENT_INJECTION_APPLIED), (s.name, e.name)
    assert span.attributes[S.ASSEMBLY_ID] and span.attributes[S.BUDGET_ID]
    # derived by the rebuild from the block arrays (contract v0.2): not computed in the host
    assert S.ASSEMBLY_HASH not in span.attributes and S.INJECTION_HASH not in span.attributes
    return span


def assert_no_content(spans: list[Any]) -> None:
    for span in spans:
        for key in (S.GEN_AI_INPUT_MESSAGES, S.GEN_AI_OUTPUT_MESSAGES,
                    S.GEN_AI_SYSTEM_INSTRUCTIONS, *S.CONTENT_ATTRIBUTES):
            assert key not in (span.attributes or {}), (span.name, key)
        for ev in span.events:
            assert not set(ev.attributes or {}) & S.CONTENT_ATTRIBUTES, (span.name, ev.name)


def assert_genai(span: Any, provider: str, model: str) -> None:
    a = span.attributes
    assert span.kind == SpanKind.CLIENT
    assert span.name == f"chat {model}"
    assert a[S.GEN_AI_OPERATION_NAME] == "chat"
    assert a[S.GEN_AI_PROVIDER_NAME] == provider
    assert a[S.GEN_AI_REQUEST_MODEL] == model
    assert a[S.GEN_AI_RESPONSE_ID]
    assert a[S.GEN_AI_RESPONSE_MODEL]
    assert a[S.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert a[S.GEN_AI_USAGE_OUTPUT_TOKENS] > 0


def markdown_table(lines: list[str], title: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header cells and the rows (first cell -> the others) of the Markdown table under
    the heading that starts with ``### {title}`` in a benchmark's report."""
    at = next(i for i, line in enumerate(lines) if line.startswith(f"### {title}"))
    header = [c.strip() for c in lines[at + 2].strip("|").split("|")]
    rows = {}
    for line in lines[at + 4:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return header, rows


def assert_added_tables(lines: list[str], scenarios: Sequence[str], timed: list[str]) -> None:
    """A benchmark report's added CPU and wall tables: one row a scenario, the
    uninstrumented median (p25–p75, positive) then one added cell a timed configuration."""
    cell = re.compile(r"-?\d+ \(-?\d+–-?\d+\)")
    for title in ("Added caller-thread CPU", "Added wall time"):
        header, rows = markdown_table(lines, title)
        assert header[2:] == timed
        assert list(rows) == list(scenarios)
        for cells in rows.values():
            assert len(cells) == 1 + len(timed)
            assert all(cell.fullmatch(c) for c in cells)
            low, high = (float(n) for n in re.findall(r"\d+", cells[0].split("(")[1]))
            assert 0 < low <= float(cells[0].split()[0]) <= high


def untimed(value: Any) -> Any:
    """``value`` (a bundle, a list of them) without its times (two runs' clocks differ)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items()
                if not k.endswith(("_at", "_time", "_unix_nano", "timestamp"))}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value
