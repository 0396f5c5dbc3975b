"""Span views to bundles: the rebuild half of the one mapping (contract sections 1, 5).

Pure: the same spans, in any order and with duplicates, give the same bundle. Output is
JSON-ready dicts shaped like :class:`otel_agent_context.Bundle` (absent fields left out),
so the processor can serialise them without building objects first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from .. import _semconv as S
from .._digest import assembly_hash, assembly_line
from .._records import ns_to_rfc3339
from .._table import ATTRIBUTES, EVENTS, FOLDED, SPANS, FieldSpec
from ._boundary import (
    REPAIRED,
    Repair,
    collect,
    duplicate_id,
    duplicate_span,
    foreign_trace,
    normalize_view,
    repair_json,
    same_span,
)
from ._view import EventView, SpanView, view_from_readable_span

__all__ = ["group_by_context", "rebuild", "rebuild_envelope"]

_STAGE_SPANS = frozenset({S.SPAN_SURFACE, S.SPAN_SELECTION, S.SPAN_BUDGET, S.SPAN_ASSEMBLY,
                          S.SPAN_COMPACTION})

_STAGE_ORDER = {name: i for i, name in enumerate((
    S.SPAN_ENVELOPE, S.SPAN_SURFACE, S.SPAN_SELECTION, S.SPAN_BUDGET, S.SPAN_ASSEMBLY,
    S.SPAN_COMPACTION))}  # the order emit_bundle writes them in

#: Attributes whose value is an array (OTLP gives tuples or lists; JSON wants lists).
_ARRAYS = frozenset(name for name, spec in ATTRIBUTES.items() if spec.type == "string[]")

Fields = tuple[tuple[str, str, bool], ...]


def _pairs(records: dict[str, tuple[FieldSpec, ...]], record: str, *skip: str) -> Fields:
    """(attribute, field, is an array) of one record as a span or event carries it."""
    return tuple((f.attribute, f.field, f.attribute in _ARRAYS) for f in records[record]
                 if f.field not in skip)


def _span(name: str, record: str, *skip: str) -> Fields:
    return _pairs(SPANS[name].records, record, *skip)


def _event(name: str, record: str, *skip: str) -> Fields:
    return _pairs(EVENTS[name].records, record, *skip)


_ITEM_EVENT = EVENTS[S.EVENT_ITEM_ADDED].records
_ITEM_FIELDS = _pairs(_ITEM_EVENT, "ContextItem", "item_id")
_SOURCE_FIELDS = _pairs(_ITEM_EVENT, "ContextSourceRef")
_NATIVE_BY_ATTR = {attr: key for key, attr in S.NATIVE_REUSED.items()}
_ENVELOPE_FIELDS = _span(S.SPAN_ENVELOPE, "ContextEnvelope", "context_id", "scope")
_SURFACE_FIELDS = _span(S.SPAN_SURFACE, "ContextSurface", "surface_id")
_SELECTION_FIELDS = _span(S.SPAN_SELECTION, "ContextSelection", "selection_id")
_BUDGET_FIELDS = _span(S.SPAN_BUDGET, "ContextBudget", "budget_id")
_WINDOW_FIELDS = _span(S.SPAN_BUDGET, "ContextWindow", "window_id", "budget_ref")
_ASSEMBLY_FIELDS = _span(S.SPAN_ASSEMBLY, "ContextAssembly", "assembly_id")
_COMPACTION_FIELDS = _span(S.SPAN_COMPACTION, "ContextCompaction", "compaction_id")
_SIGNAL_FIELDS = _event(S.EVENT_ITEM_SELECTED, "RankingSignal", "item_id")
_OMITTED_FIELDS = _event(S.EVENT_ITEM_OMITTED, "OmittedRef", "item_id")
_TRUNCATION_FIELDS = _event(S.EVENT_BUDGET_TRUNCATED, "TruncationRecord")
_SEGMENT_FIELDS = _event(S.EVENT_WINDOW_SEGMENT, "WindowSegment")
_BLOCK_FIELDS = _event(S.EVENT_ASSEMBLY_BLOCK, "AssemblyBlock", "index")
_INJECTION_FIELDS = _event(S.EVENT_INJECTION_APPLIED, "ContextInjection", "injection_id")
_COVERAGE_FIELDS = _event(S.EVENT_COMPACTION_SOURCE, "CompactionSource", "item_id")
_SUMMARY_FIELDS = _event(S.EVENT_SUMMARY_CREATED, "ContextSummary", "summary_id")
_SUMMARY_FROM_COMPACTION = tuple(
    row for row in _COMPACTION_FIELDS if row[1] in ("coverage", "loss_notes", "validation"))
_MISSING_FIELDS = _event(S.EVENT_MISSING_DETECTED, "MissingContext", "missing_id")
_REQUESTED_FIELDS = _event(S.EVENT_MISSING_REQUESTED, "MissingContext", "missing_id")
_RESOLVED_FIELDS = _event(S.EVENT_MISSING_RESOLVED, "MissingContext", "missing_id")
_REDACTION_FIELDS = _event(S.EVENT_REDACTION_APPLIED, "ContextEvent.metadata")
#: The folded form (contract v0.2): a model call's records as attributes of its inference
#: span. Block arrays -> the item event attribute each element stands for (so the item is
#: made as from a block event), and the block field it fills.
_FOLDED_ITEM = {S.ASSEMBLY_BLOCK_KINDS: S.ITEM_KIND,
                S.ASSEMBLY_BLOCK_CONTENT_MODES: S.ITEM_CONTENT_MODE,
                S.ASSEMBLY_BLOCK_CONTENT_REFS: S.ITEM_CONTENT_REF,
                S.ASSEMBLY_BLOCK_CONTENTS: S.ITEM_CONTENT,
                S.ASSEMBLY_BLOCK_TOOL_CALL_IDS: S.NATIVE_REUSED["model_api.tool_call_id"],
                S.ASSEMBLY_BLOCK_RESPONSE_IDS: S.NATIVE_REUSED["model_api.response_id"]}
#: what a block event carries beyond the block only when it describes its item
_DESCRIBING = (S.ASSEMBLY_BLOCK_CONTENT_MODES, S.ASSEMBLY_BLOCK_CONTENT_REFS,
               S.ASSEMBLY_BLOCK_TOOL_CALL_IDS, S.ASSEMBLY_BLOCK_RESPONSE_IDS)
_FOLDED_BLOCK = tuple((attr, spec.field) for attr, spec in FOLDED.items()
                      if spec.record == "AssemblyBlock" and attr != S.ASSEMBLY_BLOCK_SOURCE_COUNTS)
_FOLDED_SEGMENT = tuple((attr, spec.field) for attr, spec in FOLDED.items()
                        if spec.record == "WindowSegment")
_FOLDED_MARKS = (S.BUDGET_ID, S.ASSEMBLY_ID, S.INJECTION_ID)
#: spans whose name says they are not a model call (an envelope span is one whatever its
#: name: a folded call outside any envelope is its own envelope)
_NOT_FOLDED = frozenset({*_STAGE_SPANS, S.SPAN_ITEMS})

#: missing-context event -> (its fields, the record's time field it sets)
_MISSING_EVENTS = {S.EVENT_MISSING_DETECTED: (_MISSING_FIELDS, "created_at"),
                   S.EVENT_MISSING_REQUESTED: (_REQUESTED_FIELDS, "requested_at"),
                   S.EVENT_MISSING_RESOLVED: (_RESOLVED_FIELDS, "resolved_at")}

def _pick(attrs: Any, fields: Fields, out: dict[str, Any]) -> dict[str, Any]:
    get = attrs.get
    for attr, name, array in fields:
        value = get(attr)
        if value is not None:
            out[name] = list(value) if array else value
    return out


Pairs = tuple[tuple[str, str], ...]


def _scalars(fields: Fields) -> Pairs:
    """(attribute, field) of a record without array fields, for :func:`_pick_scalars`."""
    assert not any(array for _, _, array in fields), fields
    return tuple((attr, name) for attr, name, _ in fields)


def _pick_scalars(attrs: Any, pairs: Pairs, out: dict[str, Any]) -> dict[str, Any]:
    """:func:`_pick` for the records with no array field (the hot ones): no test per field."""
    get = attrs.get
    for attr, name in pairs:
        value = get(attr)
        if value is not None:
            out[name] = value
    return out


_BUDGET_PAIRS = _scalars(_BUDGET_FIELDS)
_WINDOW_PAIRS = _scalars(_WINDOW_FIELDS)
#: the window's fields, each the budget record's field of the same attribute and name
_WINDOW_FROM_BUDGET = tuple(name for _, name in _WINDOW_PAIRS)
assert set(_WINDOW_PAIRS) <= set(_BUDGET_PAIRS), _WINDOW_PAIRS
_SIGNAL_PAIRS = _scalars(_SIGNAL_FIELDS)
_OMITTED_PAIRS = _scalars(_OMITTED_FIELDS)
_TRUNCATION_PAIRS = _scalars(_TRUNCATION_FIELDS)
_SEGMENT_PAIRS = _scalars(_SEGMENT_FIELDS)
_COVERAGE_PAIRS = _scalars(_COVERAGE_FIELDS)


_TIMES: dict[int, str] = {}


def _t(ns: int) -> str:
    # A span's end, its events and the next span's start often share a nanosecond value.
    text = _TIMES.get(ns)
    if text is None:
        if len(_TIMES) >= 8192:
            _TIMES.clear()
        text = _TIMES[ns] = ns_to_rfc3339(ns)
    return text


# attribute -> (field, where): 0 item field, 1 item list, 2 source field, 3 source list,
# 4 a native id with an OpenTelemetry name, 5 any other attribute of the contract (skipped)
_ITEM_ATTRS: dict[str, tuple[str, int]] = {
    **{attr: ("", 5) for attr in ATTRIBUTES},
    **{attr: (key, 4) for key, attr in S.NATIVE_REUSED.items()},
    **{attr: (name, 1 if array else 0) for attr, name, array in _ITEM_FIELDS},
    **{attr: (name, 3 if array else 2) for attr, name, array in _SOURCE_FIELDS},
}
_NATIVE_PREFIX = S.SOURCE_NATIVE_PREFIX
_SIGNAL_PREFIX = S.SELECTION_SIGNAL_PREFIX


def _item_from(attrs: Any, signals: dict[str, Any] | None = None) -> dict[str, Any]:
    """An item record from an item event: one pass over the attributes that are there
    (scorer signals, ``context.selection.signal.*``, go to ``signals`` on the way)."""
    item: dict[str, Any] = {"item_id": attrs[S.ITEM_ID]}
    src: dict[str, Any] | None = None
    for key, value in attrs.items():
        spec = _ITEM_ATTRS.get(key)
        if spec is None:
            if key.startswith(_NATIVE_PREFIX):
                spec = (key[len(_NATIVE_PREFIX):], 4)
            else:
                if signals is not None and key.startswith(_SIGNAL_PREFIX):
                    signals[key[len(_SIGNAL_PREFIX):]] = value
                continue
        name, where = spec
        if where == 0:
            item[name] = value
        elif where == 5:
            continue
        elif where == 1:
            item[name] = list(value)
        else:
            if src is None:
                src = {}
            if where == 4:
                src.setdefault("external_mappings", {})[name] = value
            else:
                src[name] = value if where == 2 else list(value)
    if src:
        item["source_refs"] = [src]
    return item


def _set_field(record: dict[str, Any], name: str, value: Any, times: dict[str, int] | None,
               key: str, at: int | None) -> None:
    """A sighting (``times`` None) fills a field that is lacking; an update sets it unless a
    later update (``times[key]``) set it already."""
    if times is None:
        record.setdefault(name, value)
    elif at is not None and times.get(key, -1) <= at:
        record[name] = value
        times[key] = at


class _Builder:
    """Accumulates the records of one envelope while walking its spans."""

    def __init__(self, context_id: str) -> None:
        self.context_id = context_id
        self.items: dict[str, dict[str, Any]] = {}
        #: item id -> field -> time of the update event that set it
        self.updated: dict[str, dict[str, int]] = {}
        self.surfaces: list[dict[str, Any]] = []
        self.selections: list[dict[str, Any]] = []
        self.budgets: list[dict[str, Any]] = []
        self.windows: list[dict[str, Any]] = []
        self.assemblies: list[dict[str, Any]] = []
        self.injections: list[dict[str, Any]] = []
        self.compactions: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any]] = []
        self.missing: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, int, dict[str, Any]]] = []
        self.notes: list[str] = []

    def item(self, attrs: Any, updated_at: int | None = None,
             signals: dict[str, Any] | None = None) -> str:
        """Record the item an event describes. A sighting fills what earlier ones lacked; a
        ``context.item.updated`` event (``updated_at``) sets each field it carries, unless
        a later update set that field already. Field by field inside the source too, each
        native mapping a field of its own."""
        item_id = attrs[S.ITEM_ID]
        seen = self.items.get(item_id)
        if seen is None:
            seen = self.items[item_id] = _item_from(attrs, signals)
            if updated_at is not None:
                self._set_by_update(item_id, seen, updated_at)
            return item_id  # type: ignore[no-any-return]
        if updated_at is None:  # a sighting: fills what is lacking (inline: the common case)
            for key, value in _item_from(attrs, signals).items():
                if key not in seen:
                    seen[key] = value
                elif key == "source_refs":
                    source = seen[key][0]
                    for name, part in value[0].items():
                        if name not in source:
                            source[name] = part
                        elif name == "external_mappings":
                            mappings = source[name]
                            for native, text in part.items():
                                mappings.setdefault(native, text)
            return item_id  # type: ignore[no-any-return]
        times = self.updated.setdefault(item_id, {})
        for key, value in _item_from(attrs, signals).items():
            if key != "source_refs":
                _set_field(seen, key, value, times, key, updated_at)
                continue
            source = seen.setdefault("source_refs", [{}])[0]
            for name, part in value[0].items():
                if name == "external_mappings":
                    mappings = source.setdefault(name, {})
                    for native, text in part.items():
                        _set_field(mappings, native, text, times, f"source.native.{native}",
                                   updated_at)
                else:
                    _set_field(source, name, part, times, f"source.{name}", updated_at)
        return item_id  # type: ignore[no-any-return]

    def _set_by_update(self, item_id: str, item: dict[str, Any], at: int) -> None:
        times = self.updated.setdefault(item_id, {})
        for key in item:
            times[key] = at
        source = (item.get("source_refs") or [{}])[0]
        for name in source:
            times[f"source.{name}"] = at
        for native in source.get("external_mappings", ()):
            times[f"source.native.{native}"] = at

    def event(self, ns: int, cls: str, subject: str | None, span: SpanView,
              metadata: dict[str, str] | None = None) -> None:
        ev: dict[str, Any]
        at = _TIMES.get(ns) or _t(ns)  # _t's cache read inline: every event reads it
        if subject is not None:  # one literal: the keys in the order a bundle has them
            ev = {"event_class": cls, "occurred_at": at, "context_id": self.context_id,
                  "subject_ref": subject, "trace_id": span.trace_id, "span_id": span.span_id}
        else:
            ev = {"event_class": cls, "occurred_at": at, "context_id": self.context_id,
                  "trace_id": span.trace_id, "span_id": span.span_id}
        if metadata:
            ev["metadata"] = metadata
        events = self.events
        events.append((ns, len(events), ev))  # the position: ties keep the order of events

    # -- stages -------------------------------------------------------------------------

    def surface(self, span: SpanView, events: Sequence[EventView]) -> None:
        a = span.attributes
        sid = a.get(S.SURFACE_ID, span.span_id)
        current: dict[str, None] = {}
        removed: list[str] = []
        updated = False
        self.event(span.start_time_unix_nano, "context.surface.created", f"surface:{sid}", span)
        for ev in events:
            if ev.name == S.EVENT_ITEM_ADDED:
                item_id = self.item(ev.attributes)
                current[item_id] = None
                cls = ev.name
            elif ev.name == S.EVENT_ITEM_UPDATED:
                item_id = self.item(ev.attributes, ev.time_unix_nano)
                current[item_id] = None
                cls, updated = ev.name, True
            elif ev.name == S.EVENT_ITEM_REMOVED:
                item_id = ev.attributes[S.ITEM_ID]
                current.pop(item_id, None)
                removed.append(item_id)
                cls, updated = ev.name, True
            else:
                continue
            self.event(ev.time_unix_nano, cls, f"item:{item_id}", span)
        if updated:
            self.event(span.end_time_unix_nano, "context.surface.updated", f"surface:{sid}",
                       span)
        rec: dict[str, Any] = {"surface_id": sid}
        if current:
            rec["item_refs"] = list(current)
        if removed:
            rec["removed_item_refs"] = removed
        _pick(a, _SURFACE_FIELDS, rec)
        rec["created_at"] = _t(span.start_time_unix_nano)
        rec["completed_at"] = _t(span.end_time_unix_nano)
        self.surfaces.append(rec)

    def selection(self, span: SpanView, events: Sequence[EventView]) -> None:
        a = span.attributes
        sid = a.get(S.SELECTION_ID, span.span_id)
        rec = _pick(a, _SELECTION_FIELDS, {"selection_id": sid})
        candidates: list[str] = []
        selected: list[str] = []
        omitted: list[dict[str, Any]] = []
        signals: list[dict[str, Any]] = []
        for ev in events:
            ea = ev.attributes
            if ev.name == S.EVENT_ITEM_SELECTED:
                named: dict[str, Any] = {}
                item_id = self.item(ea, None, named)
                candidates.append(item_id)
                selected.append(item_id)
                sig: dict[str, Any] = {"item_id": item_id}
                _pick_scalars(ea, _SIGNAL_PAIRS, sig)
                if named:
                    sig["signals"] = named
                if len(sig) > 1:
                    signals.append(sig)
            elif ev.name == S.EVENT_ITEM_OMITTED:
                item_id = self.item(ea)
                candidates.append(item_id)
                omitted.append(_pick_scalars(ea, _OMITTED_PAIRS, {"item_id": item_id}))
        for key, value in (("candidate_item_refs", candidates),
                           ("selected_item_refs", selected), ("omitted_item_refs", omitted),
                           ("ranking_signals", signals)):
            if value:
                rec[key] = value
        self._check_count(a, S.SELECTION_SELECTED_COUNT, len(selected), f"selection {sid}",
                          "selected")
        self._check_count(a, S.SELECTION_OMITTED_COUNT, len(omitted), f"selection {sid}",
                          "omitted")
        rec["created_at"] = _t(span.start_time_unix_nano)
        rec["completed_at"] = _t(span.end_time_unix_nano)
        self.event(span.start_time_unix_nano, "context.selection.started",
                   f"selection:{sid}", span)
        self.event(span.end_time_unix_nano, "context.selection.completed",
                   f"selection:{sid}", span)
        self.selections.append(rec)

    def budget(self, span: SpanView, events: Sequence[EventView],
               segments: list[dict[str, Any]] | None = None) -> None:
        a = span.attributes
        get = a.get
        bid = get(S.BUDGET_ID, span.span_id)
        rec = {"budget_id": bid}
        for attr, name in _BUDGET_PAIRS:  # _pick_scalars inline (the hot record)
            value = get(attr)
            if value is not None:
                rec[name] = value
        if events:  # most budgets have none: no lists made
            truncations = []
            if segments is None:
                segments = []
            for ev in events:
                ea = ev.attributes
                if ev.name == S.EVENT_BUDGET_TRUNCATED:
                    if ea.get(S.ITEM_ID):
                        self.item(ea)
                    truncations.append(_pick_scalars(ea, _TRUNCATION_PAIRS, {}))
                elif ev.name == S.EVENT_WINDOW_SEGMENT:
                    segments.append(_pick_scalars(ea, _SEGMENT_PAIRS, {}))
            if truncations:
                rec["truncation_records"] = truncations
        if segments:
            rec["window_segments"] = segments
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        # _t's cache read inline (the hot record)
        rec["created_at"] = _TIMES.get(start) or _t(start)
        rec["completed_at"] = _TIMES.get(end) or _t(end)
        self.budgets.append(rec)
        window_id = get(S.WINDOW_ID)
        if window_id is not None:
            window = {"window_id": window_id, "budget_ref": bid}
            for name in _WINDOW_FROM_BUDGET:  # read once already, for the budget record
                if name in rec:
                    window[name] = rec[name]
            if segments:
                window["segments"] = [dict(s) for s in segments]
            window["created_at"] = rec["created_at"]
            self.windows.append(window)
        # self.event(end, ...) inline (the hot record): its time is completed_at's text
        timeline = self.events
        timeline.append((end, len(timeline), {
            "event_class": "context.budget.applied", "occurred_at": rec["completed_at"],
            "context_id": self.context_id, "subject_ref": f"budget:{bid}",
            "trace_id": span.trace_id, "span_id": span.span_id}))

    def assembly(self, span: SpanView, events: Sequence[EventView]) -> None:
        a = span.attributes
        aid = a.get(S.ASSEMBLY_ID, span.span_id)
        rec = _pick(a, _ASSEMBLY_FIELDS, {"assembly_id": aid})
        blocks: list[dict[str, Any]] = []
        sources: dict[str, None] = {}
        for ev in events:
            if ev.name == S.EVENT_ASSEMBLY_BLOCK:
                ea = ev.attributes
                block = _pick(ea, _BLOCK_FIELDS, {"index": ea[S.BLOCK_INDEX]})
                blocks.append(block)
                if ea.get(S.ITEM_ID):
                    sources[self.item(ea)] = None
                for ref in block.get("source_item_refs", ()):
                    sources[ref] = None
        self._assembled(span, rec, blocks, sources, span.end_time_unix_nano)

    def compaction(self, span: SpanView, events: Sequence[EventView]) -> None:
        a = span.attributes
        cid = a.get(S.COMPACTION_ID, span.span_id)
        rec = _pick(a, _COMPACTION_FIELDS, {"compaction_id": cid})
        sources: list[str] = []
        coverage: list[dict[str, Any]] = []
        summary_events = []
        for ev in events:
            ea = ev.attributes
            if ev.name == S.EVENT_COMPACTION_SOURCE:
                item_id = self.item(ea)
                sources.append(item_id)
                coverage.append(_pick_scalars(ea, _COVERAGE_PAIRS, {"item_id": item_id}))
            elif ev.name == S.EVENT_SUMMARY_CREATED:
                summary_events.append(ev)
        if sources:
            rec["source_item_refs"] = sources
            rec["source_coverage"] = coverage
        self._check_count(a, S.COMPACTION_SOURCE_COUNT, len(sources), f"compaction {cid}",
                          "source")
        rec["created_at"] = _t(span.start_time_unix_nano)
        rec["completed_at"] = _t(span.end_time_unix_nano)
        self.compactions.append(rec)
        self.event(span.start_time_unix_nano, "context.compaction.started",
                   f"compaction:{cid}", span)
        for ev in summary_events:
            ea = ev.attributes
            summary = _pick(ea, _SUMMARY_FIELDS,
                            {"summary_id": ea[S.SUMMARY_ID], "compaction_ref": cid})
            _pick(a, _SUMMARY_FROM_COMPACTION, summary)
            if sources:
                summary["source_item_refs"] = list(sources)
            summary["created_at"] = _t(ev.time_unix_nano)
            self.summaries.append(summary)
            self.event(ev.time_unix_nano, "context.summary.created",
                       f"summary:{ea[S.SUMMARY_ID]}", span)
        self.event(span.end_time_unix_nano, "context.compaction.completed",
                   f"compaction:{cid}", span)

    # -- the folded form: a model call on its one inference span -------------------------

    def folded(self, span: SpanView) -> None:
        """The budget, window, assembly and injection an inference span carries as
        attributes (contract v0.2): the same records as from their spans and events."""
        a = span.attributes
        start = span.start_time_unix_nano
        assembled = self._folded_assembly(span, a, start) if S.ASSEMBLY_ID in a else None
        if S.INJECTION_ID in a:
            iid = a[S.INJECTION_ID]
            rec = _pick(a, _INJECTION_FIELDS, {"injection_id": iid})
            if "hash" not in rec and assembled is not None and "hash" in assembled:
                rec["hash"] = assembled["hash"]  # injected as assembled: the same hash
            rec["created_at"] = _t(start)
            self.injections.append(rec)
            self.event(start, S.EVENT_INJECTION_APPLIED, f"injection:{iid}", span)
        if S.BUDGET_ID in a:
            truncations = [ev for ev in span.events if ev.name == S.EVENT_BUDGET_TRUNCATED]
            names = a.get(S.WINDOW_SEGMENT_NAMES)
            segments = []
            if names:
                columns = [(field, a.get(attr)) for attr, field in _FOLDED_SEGMENT]
                for i in range(len(names)):
                    seg: dict[str, Any] = {}
                    for field, values in columns:
                        if values is not None and values[i] != "" and values[i] != -1:
                            seg[field] = values[i]
                    segments.append(seg)
            self.budget(span, truncations, segments)

    def _folded_assembly(self, span: SpanView, a: Any, start: int) -> dict[str, Any]:
        aid = a[S.ASSEMBLY_ID]
        rec = _pick(a, _ASSEMBLY_FIELDS, {"assembly_id": aid})
        item_ids = a.get(S.ASSEMBLY_BLOCK_ITEM_IDS) or ()
        columns = [(field, a.get(attr)) for attr, field in _FOLDED_BLOCK if field != "item_id"]
        item_columns = [(key, a.get(attr)) for attr, key in _FOLDED_ITEM.items()
                        if attr in a]
        describing = S.ASSEMBLY_BLOCK_CONTENTS in a
        extras = [a[attr] for attr in _DESCRIBING if attr in a]
        tokens = a.get(S.ASSEMBLY_BLOCK_TOKENS)
        digests = a.get(S.ASSEMBLY_BLOCK_DIGESTS)
        counts = a.get(S.ASSEMBLY_BLOCK_SOURCE_COUNTS)
        refs = a.get(S.ASSEMBLY_BLOCK_SOURCE_ITEM_REFS) or ()
        blocks: list[dict[str, Any]] = []
        sources: dict[str, None] = {}
        at = 0
        for i, item_id in enumerate(item_ids):
            block: dict[str, Any] = {"index": i, "item_id": item_id}
            for field, values in columns:
                if values is not None and values[i] != "" and values[i] != -1:
                    block[field] = values[i]
            if counts is not None:
                mine = refs[at:at + counts[i]]
                at += counts[i]
                if mine:
                    block["source_item_refs"] = list(mine)
            blocks.append(block)
            if not item_id:
                continue
            # the item as a block event would give it: its id and kind, and when the block
            # describes it (content captured, or anything beyond an inline text) the rest
            item: dict[str, Any] = {S.ITEM_ID: item_id}
            for key, values in item_columns:
                if values[i] != "":
                    item[key] = values[i]
            if describing or any(values[i] for values in extras):
                item.setdefault(S.ITEM_CONTENT_MODE, "inline")
                if tokens is not None and tokens[i] != -1:
                    item[S.ITEM_TOKEN_ESTIMATE] = tokens[i]
                if digests is not None and digests[i]:
                    item[S.ITEM_DIGEST] = digests[i]
            sources[self.item(item)] = None
            for ref in block.get("source_item_refs", ()):
                sources[ref] = None
        if not rec.get("hash"):  # not sent (ours sends none), or empty: derived
            rec.pop("hash", None)
            if S.ASSEMBLY_BLOCK_ITEM_IDS in a and _whole_blocks(span, a, len(item_ids)):
                # what the explicit form's emitter computes for the same blocks
                rec["hash"] = assembly_hash(
                    [assembly_line(i, item_id, digests[i] if digests else "")
                     for i, item_id in enumerate(item_ids)])
        self._assembled(span, rec, blocks, sources, start)
        return rec

    def _assembled(self, span: SpanView, rec: dict[str, Any], blocks: list[dict[str, Any]],
                   sources: dict[str, None], at: int) -> None:
        """An assembly's record completed (from its span and events, or folded) and kept."""
        aid = rec["assembly_id"]
        if blocks:
            rec["ordered_blocks"] = blocks
        if sources:
            rec["source_item_refs"] = list(sources)
        counted = span.attributes.get(S.ASSEMBLY_BLOCK_COUNT)
        if counted is not None and counted > len(blocks):
            self.notes.append(f"assembly {aid}: {counted} blocks counted, "
                              f"{len(blocks)} recorded")
        rec["created_at"] = _t(at)
        self.assemblies.append(rec)
        self.event(at, "context.assembly.created", f"assembly:{aid}", span)

    # -- events that may sit on any span of the envelope ---------------------------------

    def span_events(self, span: SpanView) -> None:
        for ev in span.events:
            name = ev.name
            ea = ev.attributes
            if name == S.EVENT_INJECTION_APPLIED:
                iid = ea[S.INJECTION_ID]
                rec = _pick(ea, _INJECTION_FIELDS, {"injection_id": iid})
                rec["created_at"] = _t(ev.time_unix_nano)
                self.injections.append(rec)
                self.event(ev.time_unix_nano, name, f"injection:{iid}", span)
            elif name in _MISSING_EVENTS:
                fields, stamp = _MISSING_EVENTS[name]
                mid = ea[S.MISSING_ID]
                rec = self.missing.setdefault(mid, {"missing_id": mid})
                _pick(ea, fields, rec)
                rec[stamp] = _t(ev.time_unix_nano)
                self.event(ev.time_unix_nano, name, f"missing:{mid}", span)
            elif name == S.EVENT_REDACTION_APPLIED:
                meta = _pick(ea, _REDACTION_FIELDS, {})
                self.event(ev.time_unix_nano, name, f"item:{ea.get(S.ITEM_ID)}", span,
                           {k: str(v) for k, v in meta.items()})

    def _check_count(self, attrs: Any, key: str, recorded: int, what: str, noun: str) -> None:
        counted = attrs.get(key)
        if counted is not None and counted > recorded:
            self.notes.append(f"{what}: {counted} {noun} items counted, {recorded} recorded")


#: the folded arrays an assembly's hash is derived from
_HASHED_ARRAYS = frozenset((S.ASSEMBLY_BLOCK_ITEM_IDS, S.ASSEMBLY_BLOCK_DIGESTS))


def _whole_blocks(span: SpanView, a: Any, carried: int) -> bool:
    """Whether a folded span's blocks are all there as sent, so that a hash derived from them
    is the one its emitter would have computed: not when the boundary cut, padded or dropped
    from the item ids or digests, nor when the span counts more blocks than it carries."""
    counted = a.get(S.ASSEMBLY_BLOCK_COUNT)
    if isinstance(counted, int) and counted > carried:
        return False
    return not any(r.field in _HASHED_ARRAYS for r in span.repairs)


#: stage span name -> the builder's method for it
_STAGES = {name: getattr(_Builder, name[len("context."):]) for name in _STAGE_SPANS}


def group_by_context(spans: Iterable[SpanView]) -> dict[str, list[SpanView]]:
    """Spans that carry ``context.id``, grouped by it (in first-seen order)."""
    groups: dict[str, list[SpanView]] = {}
    for span in spans:
        cid = span.attributes.get(S.CONTEXT_ID)
        if isinstance(cid, str) and cid:
            groups.setdefault(cid, []).append(span)
    return groups


def rebuild(spans: Iterable[Any]) -> list[dict[str, Any]]:
    """Every envelope in ``spans``, one bundle each (complete or partial).

    ``spans`` are :class:`SpanView` or SDK ``ReadableSpan`` (what an exporter receives).
    """
    views = [s if isinstance(s, SpanView) else view_from_readable_span(s) for s in spans]
    return [rebuild_envelope(group) for group in group_by_context(views).values()]


def _missing_status(rec: dict[str, Any]) -> None:
    if "resolved_at" in rec:
        rec["status"] = "resolved"
    elif "requested_at" in rec:
        rec["status"] = "requested"
    elif "status" not in rec:
        rec["status"] = "open"


#: Partial reasons that mean spans or events of the envelope may be missing: a selected item
#: no block names may then have been named by a block that was lost, so none is judged.
_LOSSY = frozenset({"no_envelope_span", "missing_spans", "dropped_data", "uncounted_items",
                    "missing_events", "timeout", "evicted", "shutdown"})


def _not_injected(b: _Builder, reasons: Sequence[str]) -> None:
    """List, on its selection, each selected item no assembly block of the envelope names
    (as its item or among its sources): selected but never injected. Judged only when the
    envelope assembled something and lost nothing, and only for items whose content the
    emitter knew (they carry a digest): a block carrying one of those would name it."""
    if not b.assemblies or not b.selections or _LOSSY.intersection(reasons):
        return
    named: set[str] = set()
    for asm in b.assemblies:
        named.update(asm.get("source_item_refs", ()))
    items = b.items
    for sel in b.selections:
        missing = [i for i in sel.get("selected_item_refs", ())
                   if i not in named and "digest" in items.get(i, ())]
        if missing:
            sel["not_injected_item_refs"] = missing


def _one_record_per_id(b: _Builder, spans: Sequence[SpanView]) -> list[Repair]:
    """Ids are unique within an envelope: a later record under an id already recorded (an
    injection both folded and sent as an event, two calls reusing an id) is left out, the
    first kept, and said (on the last span naming the id: the later record's)."""
    said: list[Repair] = []
    for records, field in ((b.surfaces, "surface_id"), (b.selections, "selection_id"),
                           (b.budgets, "budget_id"), (b.assemblies, "assembly_id"),
                           (b.injections, "injection_id"), (b.compactions, "compaction_id"),
                           (b.summaries, "summary_id")):
        if len(records) < 2:
            continue
        ids = [rec.get(field) for rec in records]
        if len(set(ids)) == len(ids):
            continue  # every id once: the common case
        seen: set[Any] = set()
        kept = []
        for rec in records:
            ident = rec.get(field)
            if ident not in seen:
                seen.add(ident)
                kept.append(rec)
                continue
            where = next((s.span_id for s in reversed(spans)
                          if ident in s.attributes.values()
                          or any(ident in e.attributes.values() for e in s.events)), "")
            said.append(duplicate_id(field, str(ident), where))
        records[:] = kept
    return said


_START = attrgetter("start_time_unix_nano")


def _order(s: SpanView) -> tuple[int, int, str, str]:
    return (s.start_time_unix_nano, _STAGE_ORDER.get(s.name, len(_STAGE_ORDER)), s.span_id,
            s.trace_id)


def rebuild_envelope(spans: Sequence[SpanView], *, partial_reasons: Sequence[str] = (),
                     repairs: Sequence[Repair] = ()) -> dict[str, Any]:
    """One envelope's bundle from the spans that carry its ``context.id``.

    The bundle is ``partial`` when the envelope span is missing, fewer spans arrived than
    its ``context.span_count`` promised, the SDK dropped events or attributes, a stage
    counted more items than it recorded, or the caller names ``partial_reasons`` (e.g.
    ``timeout``, ``evicted``, ``shutdown``). ``repairs`` are what the caller's own checks
    changed (the processor's: spans of another trace left out); the boundary's come with
    the spans.
    """
    # Deterministic whatever the arrival order; duplicates (client retries) count once.
    # A span id sent again with other content keeps its first sighting, and says so.
    unique: dict[tuple[str, str], SpanView] = {}
    duplicates: list[Repair] = []
    for span in spans:
        seen = unique.setdefault((span.trace_id, span.span_id),
                                 span if span.checked else normalize_view(span))
        if seen is not span and not same_span(seen, normalize_view(span)) and not any(
                r.span_id == span.span_id for r in duplicates):
            duplicates.append(duplicate_span(span))
    # Spans that start at the same time (records replayed with one timestamp) keep the
    # lifecycle's order, so records and the event timeline do not depend on random span ids.
    # The trace id last: two traces' spans may share everything else (the envelope's trace
    # is then the first one's, whatever the arrival order).
    ordered = sorted(unique.values(), key=_START)
    starts = list(map(_START, ordered))
    if len(set(starts)) != len(starts):  # a tie: the stable sort by start alone is not it
        ordered.sort(key=_order)
    if not ordered:
        raise ValueError("rebuild_envelope needs at least one span")
    envelope_span = next((s for s in ordered if S.CONTEXT_SCOPE in s.attributes), None)
    # An envelope lives in one trace (contract section 1): its envelope span's, else its
    # first span's. A span of another trace with the same context.id is left out, and said.
    trace_id = (envelope_span or ordered[0]).trace_id
    foreign = [foreign_trace(s, trace_id) for s in ordered if s.trace_id != trace_id]
    if foreign:
        ordered = [s for s in ordered if s.trace_id == trace_id]
    context_id = str(ordered[0].attributes.get(S.CONTEXT_ID))
    b = _Builder(context_id)

    # Item overflow spans (context.items) add their events to the stage span above them,
    # through any number of context.items levels.
    items_parts: dict[str, list[SpanView]] = {}
    items_parent = {s.span_id: s.parent_span_id for s in ordered if s.name == S.SPAN_ITEMS}
    for span in ordered if items_parent else ():
        if span.name == S.SPAN_ITEMS and span.parent_span_id is not None:
            stage = span.parent_span_id
            for _ in range(len(items_parent)):  # bounded: a parent cycle cannot loop
                if stage not in items_parent or items_parent[stage] is None:
                    break
                stage = items_parent[stage]  # type: ignore[assignment]
            items_parts.setdefault(stage, []).append(span)
    for parts in items_parts.values():
        parts.sort(key=lambda s: (s.attributes.get(S.ITEMS_PART, 0), s.start_time_unix_nano))

    dropped_events = dropped_attrs = 0
    for span in ordered:
        dropped_events += span.dropped_events_count
        dropped_attrs += span.dropped_attributes_count
        name = span.name
        build = _STAGES.get(name)
        if build is not None:
            events: Sequence[EventView] = span.events
            if items_parts:
                more = items_parts.get(span.span_id)
                if more:
                    events = list(events)
                    for part in more:
                        events.extend(part.events)
            build(b, span, events)
        elif name not in _NOT_FOLDED and any(m in span.attributes for m in _FOLDED_MARKS):
            b.folded(span)
        if span.events:
            b.span_events(span)
    duplicates.extend(_one_record_per_id(b, ordered))

    # -- the envelope record --------------------------------------------------------------
    env: dict[str, Any] = {"context_id": context_id}
    if envelope_span is not None:
        a = envelope_span.attributes
        env["scope"] = a[S.CONTEXT_SCOPE]
        env["created_at"] = _t(envelope_span.start_time_unix_nano)
        env["completed_at"] = _t(envelope_span.end_time_unix_nano)
        _pick(a, _ENVELOPE_FIELDS, env)
        meta = {k: str(a[k]) for k in S.ENVELOPE_REUSED if k in a}
        if meta:
            env["metadata"] = meta
    else:
        env["scope"] = "custom"
        env["created_at"] = _t(ordered[0].start_time_unix_nano)
    env.setdefault("schema_version", S.SCHEMA_VERSION)
    if b.surfaces:
        env["surface_refs"] = [s["surface_id"] for s in b.surfaces]
    item_refs: dict[str, None] = {}
    for sel in b.selections:
        item_refs.update(dict.fromkeys(sel.get("selected_item_refs", ())))
    for asm in b.assemblies:
        item_refs.update(dict.fromkeys(asm.get("source_item_refs", ())))
    if item_refs:
        env["item_refs"] = list(item_refs)
    if b.selections:
        env["selection_refs"] = [s["selection_id"] for s in b.selections]
    if b.budgets:
        env["budget_ref"] = b.budgets[0]["budget_id"]
    if b.assemblies:
        env["assembly_refs"] = [a["assembly_id"] for a in b.assemblies]
    if b.injections:
        env["injection_refs"] = [i["injection_id"] for i in b.injections]
    if b.compactions:
        env["compaction_refs"] = [c["compaction_id"] for c in b.compactions]
    missing = list(b.missing.values())
    for rec in missing:
        _missing_status(rec)
    if missing:
        env["missing_context_refs"] = [m["missing_id"] for m in missing]
    env["telemetry_refs"] = [{"trace_id": s.trace_id, "span_id": s.span_id, "span_name": s.name}
                             for s in ordered]

    # -- completeness -----------------------------------------------------------------------
    reasons = list(partial_reasons)
    notes = list(b.notes)
    expected = None
    received = len(ordered) - (1 if envelope_span is not None else 0)
    if envelope_span is None:
        reasons.append("no_envelope_span")
        notes.append("the envelope span never arrived")
    else:
        raw = envelope_span.attributes.get(S.CONTEXT_SPAN_COUNT)
        expected = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        if expected is None:
            reasons.append("no_span_count")
            notes.append("the envelope span carries no context.span_count")
        elif received < expected:
            reasons.append("missing_spans")
            notes.append(f"expected {expected} spans besides the envelope, received {received}")
    if dropped_events or dropped_attrs:
        reasons.append("dropped_data")
        notes.append(f"the SDK dropped {dropped_events} events and {dropped_attrs} attributes "
                     "(span limits)")
    if b.notes:
        reasons.append("uncounted_items")
    repairs = [*collect(ordered), *foreign, *duplicates, *repairs]
    if repairs:
        reasons.append(REPAIRED)
    _not_injected(b, reasons)
    # a block may name as its source an item the envelope recorded nowhere else (a foreign
    # emitter's, or one on a span that never came): it is still an item, known by its id
    for asm in b.assemblies:
        for ref in asm.get("source_item_refs", ()):
            if ref not in b.items:
                b.items[ref] = {"item_id": ref}
    rebuild_info: dict[str, Any] = {
        "status": "partial" if reasons else "complete",
        "expected_spans": expected,
        "received_spans": received,
        "dropped_events": dropped_events,
        "dropped_attributes": dropped_attrs,
    }
    if expected is None:
        del rebuild_info["expected_spans"]
    if reasons:
        rebuild_info["partial_reasons"] = list(dict.fromkeys(reasons))
    if notes:
        rebuild_info["notes"] = notes
    if repairs:
        rebuild_info["repairs"] = [repair_json(r) for r in repairs]

    bundle: dict[str, Any] = {"context_envelope": env}
    for key, records in (
        ("context_surfaces", b.surfaces), ("context_items", list(b.items.values())),
        ("context_selections", b.selections), ("context_budgets", b.budgets),
        ("context_windows", b.windows), ("context_assemblies", b.assemblies),
        ("context_injections", b.injections), ("context_compactions", b.compactions),
        ("context_summaries", b.summaries), ("missing_context", missing),
    ):
        if records:
            bundle[key] = records
    b.events.sort()  # (time, sequence number, event): the number is unique, no tie left
    if b.events:
        bundle["context_events"] = [e[2] for e in b.events]
    bundle["rebuild"] = rebuild_info
    return bundle
