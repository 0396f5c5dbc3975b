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


def blocks(spans: list[Any]) -> list[tuple[str, str, str]]:
    """(item id, kind, injection point) of every assembly block, in order."""
    (asm,) = named(spans, S.SPAN_ASSEMBLY)
    return [(b[S.ITEM_ID], b[S.ITEM_KIND], b[S.INJECTION_POINT])
            for b in events(asm, S.EVENT_ASSEMBLY_BLOCK)]


def assert_no_content(spans: list[Any]) -> None:
    for span in spans:
        for key in (S.GEN_AI_INPUT_MESSAGES, S.GEN_AI_OUTPUT_MESSAGES,
                    S.GEN_AI_SYSTEM_INSTRUCTIONS):
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
