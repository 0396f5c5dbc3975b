"""Property: off-spec spans over the contract's names, through the processor and in process.

Mixes of OTLP spans are generated from the one table (``_table``): every attribute a span or
event may carry, with a well-formed value or any other one (wrong types, kvlist and bytes,
mis-cased and unknown enum values, NaN and infinities, numeric strings), events lacking
their id or their time, duplicate spans and events, any arrival order, spans of a second
trace with the same ``context.id``, envelopes with and without their envelope span. Beside
them go well-formed records whose ids are known (a selection with selected and omitted
items, a budget with a window segment). Each mix is rebuilt twice: (a) as the processor
does, OTLP bytes -> ``decode_request`` -> ``rebuild_envelope`` per (trace, context id); (b)
in process, the same spans as SDK ``ReadableSpan`` -> ``view_from_readable_span`` ->
``rebuild`` (one group per context id, as ``BundleSpanProcessor`` keeps them).

Every bundle must: validate against the bundle schema (as a sink writes it), hold no
non-finite number and no time in 1970, give metric labels of enum attributes only the
enum's values, ``custom`` or ``unknown``; be ``complete`` only with no repair and no span
missing; list a repair whenever a value that needs one was sent in its spans, and only
for spans that sent one; keep the well-formed records (or list their span as left out);
keep one trace. The in-process bundle must not depend on arrival order, and equal the
processor's whenever the mix has one trace (kvlist and bytes aside, whose repairs are
worded after what they decoded to).

Model calls in contract v0.2's folded form go in the mix too: inference spans whose parallel
arrays (blocks, window segments) have the right length or another one, well-formed or
off-spec elements, source counts that add up or not (:func:`folded_span`).

Whether a value needs a repair is decided here (:func:`needs_repair`, :func:`folded_bad`),
from the contract's rules, never by asking the code under test.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonschema
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags
from processor_testkit import REPO, request

from otel_agent_context import bundle_json_schema
from otel_agent_context._measure import measure
from otel_agent_context._table import ATTRIBUTES, EVENTS, FOLDED, METRICS, SPANS, AttributeSpec
from otel_agent_context.processor._decode import decode_request, parse_protobuf
from otel_agent_context.rebuild import rebuild, rebuild_envelope, view_from_readable_span

CID = "ctx-prop"
MAIN, OTHER = 0xA1, 0xB2  # trace ids
BASE = 1_800_000_000_000_000_000
ENVELOPE, SELECTION, BUDGET = 1, 2, 3  # span ids of the well-formed spans
SERVICE = "prop-agent"
VALIDATOR = jsonschema.Draft202012Validator(bundle_json_schema())
INT64 = (-(1 << 63), (1 << 63) - 1)

#: (metric, label position) -> the enum the label is taken from
ENUM_LABELS = {
    (metric, i): ATTRIBUTES[attribute].members
    for metric, spec in METRICS.items()
    for i, (_label, attribute) in enumerate(spec.labels)
    if attribute in ATTRIBUTES and ATTRIBUTES[attribute].members
}


class KvList(dict):  # type: ignore[type-arg]
    """An OTLP ``kvlist_value`` (a plain dict once in process)."""


# -- the oracle ----------------------------------------------------------------------------------


#: the id of each folded record -> the array of its positions ("" for none)
FOLDED_MARKS = {"context.budget.id": "context.window.segment_names",
                "context.assembly.id": "context.assembly.block_item_ids",
                "context.injection.id": ""}


def needs_repair(spec: AttributeSpec, value: Any) -> bool:
    """Whether the boundary must change ``value`` of an attribute of type ``spec`` (contract:
    whole doubles for ints and ints for doubles are taken as they are)."""
    if isinstance(value, (KvList, bytes)):
        return True
    kind = spec.type
    if kind == "string":
        if value == "" and spec.name in FOLDED_MARKS:
            return True  # a record under id "" is no record
        return not isinstance(value, str) or bool(spec.members) and value not in spec.members
    if kind in ("int", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return True
        below = spec.minimum is not None and value < spec.minimum  # a count: never negative
        if kind == "double":
            return below
        if isinstance(value, float) and not value.is_integer():
            return True
        if not INT64[0] <= value <= INT64[1]:
            return True
        return below
    if kind == "boolean":
        return not isinstance(value, bool)
    if not isinstance(value, (list, tuple)):
        return True
    return any(not isinstance(e, str) or bool(spec.members) and e not in spec.members
               for e in value)


# -- generated spans -------------------------------------------------------------------------------


@dataclass
class Ev:
    name: str
    time: int  # 0: none sent
    attrs: list[tuple[str, Any]]
    bad: bool = False


@dataclass
class Sp:
    trace: int
    span_id: int
    name: str
    start: int
    attrs: list[tuple[str, Any]]
    events: list[Ev] = field(default_factory=list)
    parent: int | None = None
    bad: bool = False


@dataclass
class Scenario:
    spans: list[Sp]
    selected: list[str]
    omitted: list[tuple[str, str]]
    segment: dict[str, Any]
    scope: str | None  # the envelope span's scope, if it was sent well-formed


TEXT = st.text(max_size=12)  # any code point but surrogates: NUL, RTL, emoji...
FINITE = st.floats(allow_nan=False, allow_infinity=False)
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
ANY_INT = st.integers(*INT64)
SCALAR = st.one_of(TEXT, ANY_INT, FINITE, NON_FINITE, st.booleans())
OPAQUE = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b"]), TEXT, max_size=2).map(KvList),
    st.binary(max_size=4))
ANY_VALUE = st.one_of(SCALAR, st.lists(SCALAR | OPAQUE, max_size=3), OPAQUE)


def valid_value(spec: AttributeSpec) -> st.SearchStrategy[Any]:
    if spec.type == "string":
        return st.sampled_from(spec.members) if spec.members else TEXT
    counts = spec.minimum is not None
    if spec.type == "int":
        ints = st.integers(0, INT64[1]) if counts else ANY_INT
        whole = st.integers(-(1 << 53), 1 << 53).map(float)  # JavaScript encoders
        if counts:
            whole = whole.map(abs)
        return ints | whole
    if spec.type == "double":
        numbers = FINITE | st.integers(-(1 << 53), 1 << 53)
        return numbers.map(abs) if counts else numbers
    if spec.type == "boolean":
        return st.booleans()
    return st.lists(st.sampled_from(spec.members) if spec.members else TEXT, max_size=3)


def off_value(spec: AttributeSpec) -> st.SearchStrategy[Any]:
    """Values aimed at what senders get wrong for this attribute."""
    options = [ANY_VALUE, OPAQUE, NON_FINITE]
    if spec.members:
        cased = [m.upper() for m in spec.members if m.upper() != m]
        options += [st.sampled_from(cased), TEXT.filter(lambda t: t not in spec.members)]
    if spec.type in ("int", "double"):
        options += [ANY_INT.map(str), FINITE.map(lambda f: f + 0.5),
                    st.integers(1 << 64, 1 << 70).map(str)]
    if spec.type == "string[]":
        options += [TEXT, st.lists(ANY_INT, min_size=1, max_size=2)]
    if spec.minimum is not None:
        options.append(st.integers(-5, -1))
    return st.one_of(options)


def value(spec: AttributeSpec) -> st.SearchStrategy[Any]:
    return st.one_of(valid_value(spec), valid_value(spec), off_value(spec))


def _fields(records: dict[str, Any]) -> list[str]:
    return sorted({f.attribute for fs in records.values() for f in fs})


EXTRA_KEYS = ["context.selection.signal.bm25", "context.source.native.a2a.task_id",
              "gen_ai.agent.name", "context.items.part", "context.scope", "context.span_count"]


def _spec(key: str) -> AttributeSpec:
    if key.startswith("context.selection.signal."):
        return AttributeSpec(key, "double", (), False, False)
    if key.startswith("context.source.native."):
        return AttributeSpec(key, "string", (), False, False)
    return ATTRIBUTES[key]


@st.composite
def attributes(draw: Any, keys: list[str]) -> tuple[list[tuple[str, Any]], bool]:
    chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=6))
    out = [(key, draw(value(_spec(key)))) for key in chosen]
    return out, any(needs_repair(_spec(k), v) for k, v in out)


@st.composite
def event(draw: Any, start: int) -> Ev:
    name = draw(st.sampled_from(sorted(EVENTS)))
    spec = EVENTS[name]
    required = sorted({key for alternatives in spec.required for key in alternatives})
    keys = sorted(set(_fields(spec.records)) | set(required) | {
        "context.selection.signal.bm25", "context.source.native.a2a.task_id"})
    attrs, bad = draw(attributes(keys))
    if draw(st.booleans()):  # usually carry what the event must carry
        have = dict(attrs)
        for key in required:
            if key not in have:
                attrs.append((key, draw(valid_value(ATTRIBUTES[key]))))
    have = dict(attrs)
    bad = bad or any(needs_repair(_spec(k), v) for k, v in attrs)
    lacking = any(not any(key in have and have[key] != "" for key in alternatives)
                  for alternatives in spec.required)
    time = draw(st.just(0) | st.integers(start - 10**9, start + 10**9))
    return Ev(name, time, attrs, bad or lacking or time == 0)


SPAN_NAMES = [*sorted(SPANS), "invoke_agent planner", "chat gpt-x"]


@st.composite
def off_span(draw: Any, span_id: int, parents: list[int]) -> Sp:
    name = draw(st.sampled_from(SPAN_NAMES))
    keys = sorted((set(_fields(SPANS[name].records) if name in SPANS else ())
                   | set(EXTRA_KEYS)) - {"context.id"})
    attrs, bad = draw(attributes(keys))
    start = BASE + draw(st.integers(-2_000, 5_000))
    events = draw(st.lists(event(start), max_size=4))
    if events and draw(st.booleans()):
        events.append(replace(events[0]))  # a duplicate event
    events = draw(st.permutations(events))
    parent = draw(st.sampled_from(parents)) if name == "context.items" or draw(
        st.booleans()) else None
    return Sp(MAIN, span_id, name, start, [("context.id", CID), *attrs], list(events), parent,
              bad or any(e.bad for e in events))


ids = st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=6)

SOURCE_COUNTS = "context.assembly.block_source_counts"
SOURCE_REFS = "context.assembly.block_source_item_refs"
#: the arrays that set the lengths: blocks and window segments
ANCHORS = sorted({spec.parallel_to or key for key, spec in FOLDED.items()})


def element_ok(key: str, element: Any) -> bool:
    """A well-formed element of a folded array ("" and -1 say: none for this position)."""
    spec = ATTRIBUTES[key]
    if spec.type == "int[]":  # a count's element is -1 ("not given") or more
        return type(element) is int and INT64[0] <= element <= INT64[1] and (
            spec.minimum is None or element >= -1)
    return isinstance(element, str) and (not spec.members or element in spec.members
                                         or element == "")


def folded_bad(attrs: dict[str, Any]) -> bool:
    """Whether the boundary must repair a folded span's arrays (contract v0.2's rules)."""
    for mark, anchor in FOLDED_MARKS.items():
        if attrs.get(mark) == "" or anchor and anchor in attrs and mark not in attrs:
            return True  # a folded record without its id
    for key, value in attrs.items():
        if key in FOLDED:
            if not all(element_ok(key, e) for e in value):
                return True
            if key in ANCHORS and "" in value:  # a block or segment without its id
                return True
            anchor = FOLDED[key].parallel_to
            if anchor and (anchor not in attrs or len(attrs[anchor]) != len(value)):
                return True
        elif key == SOURCE_REFS and not all(isinstance(e, str) for e in value):
            return True
    counts, refs = attrs.get(SOURCE_COUNTS), attrs.get(SOURCE_REFS)
    if (counts is None) != (refs is None):
        return True
    return counts is not None and refs is not None and (
        any(c < 0 for c in counts) or sum(counts) != len(refs))


def folded_element(key: str) -> st.SearchStrategy[Any]:
    spec = ATTRIBUTES[key]
    if spec.type == "int[]":
        good: st.SearchStrategy[Any] = st.integers(-1, 5) | st.just(-1)
        if spec.minimum is not None:
            good = good | st.integers(-3, -2)  # below "not given": repaired
    elif spec.members:
        good = st.sampled_from([*spec.members, ""])
    else:
        good = ids | st.just("")
    off = st.one_of(SCALAR, st.sampled_from([m.upper() for m in spec.members] or ["x"]))
    return st.one_of(good, good, good, off)


@st.composite
def folded_span(draw: Any, span_id: int) -> Sp:
    """An inference span carrying a model call in the folded form, its arrays of the right
    length or not, their elements well-formed or not."""
    sizes = {anchor: draw(st.integers(0, 4)) for anchor in ANCHORS}
    attrs: dict[str, Any] = {}
    for key, value in (("context.budget.id", f"bud-f{span_id}"),  # ids unique in the envelope
                       ("context.assembly.id", f"asm-f{span_id}"),
                       ("context.injection.id", f"inj-f{span_id}")):
        if draw(st.integers(0, 3)):
            attrs[key] = value
    for key, spec in FOLDED.items():
        if not draw(st.integers(0, 2)):
            continue
        size = sizes[spec.parallel_to or key]
        if key == SOURCE_COUNTS:
            continue  # below, with the refs
        if spec.parallel_to and not draw(st.integers(0, 5)):
            size = draw(st.integers(0, 5))  # another length than its anchor
        attrs[key] = draw(st.lists(folded_element(key), min_size=size, max_size=size))
    if draw(st.booleans()):
        blocks = sizes[FOLDED[SOURCE_COUNTS].parallel_to]
        counts = draw(st.lists(st.integers(0, 2), min_size=blocks, max_size=blocks))
        refs = draw(st.lists(ids, min_size=sum(counts), max_size=sum(counts)))
        if not draw(st.integers(0, 4)):  # counts that do not add up, or one without the other
            choice = draw(st.integers(0, 2))
            if choice == 0:
                refs.append("extra")
            elif choice == 1:
                counts = []
            else:
                refs = []
        if counts or not refs:
            attrs[SOURCE_COUNTS] = counts
        if refs or not counts:
            attrs[SOURCE_REFS] = refs
    start = BASE + draw(st.integers(-2_000, 5_000))
    return Sp(MAIN, span_id, "chat gpt-x", start, [("context.id", CID), *attrs.items()],
              bad=folded_bad(attrs))


@st.composite
def scenarios(draw: Any) -> Scenario:
    selected = [f"good-s{i}" for i in range(draw(st.integers(1, 3)))]
    reasons = ATTRIBUTES["context.omission.reason"].members
    omitted = [(f"good-o{i}", draw(st.sampled_from(reasons)))
               for i in range(draw(st.integers(1, 3)))]
    kinds = st.sampled_from(ATTRIBUTES["context.item.kind"].members)
    t = BASE + 1_000
    selection = Sp(MAIN, SELECTION, "context.selection", t, [
        ("context.id", CID), ("context.selection.id", "sel-good"),
        ("context.selection.candidate_count", len(selected) + len(omitted))], [
        *(Ev("context.item.selected", t + 1 + i,
             [("context.item.id", item), ("context.item.kind", draw(kinds)),
              ("context.selection.rank", i + 1)]) for i, item in enumerate(selected)),
        *(Ev("context.item.omitted", t + 10 + i,
             [("context.item.id", item), ("context.omission.reason", reason),
              ("context.item.token_estimate", 100)]) for i, (item, reason) in enumerate(omitted)),
    ], parent=ENVELOPE)
    segment = {"segment": "history", "order": 1, "used_tokens": draw(st.integers(0, 10**6))}
    budget = Sp(MAIN, BUDGET, "context.budget", BASE + 2_000, [
        ("context.id", CID), ("context.budget.id", "bud-good"),
        ("context.budget.utilization", draw(st.floats(0, 2)))], [
        Ev("context.window.segment", BASE + 2_001, [
            ("context.window.segment", "history"), ("context.window.order", 1),
            ("context.window.used_tokens", segment["used_tokens"])])], parent=ENVELOPE)
    off = [draw(off_span(10 + i, [ENVELOPE, SELECTION, BUDGET]))
           for i in range(draw(st.integers(0, 5)))]
    folded = [draw(folded_span(30 + i)) for i in range(draw(st.integers(0, 2)))]
    spans = [selection, budget, *off, *folded]
    scope = None
    if draw(st.integers(0, 3)):  # mostly, the envelope span is there
        sent = draw(st.sampled_from(ATTRIBUTES["context.scope"].members) | st.sampled_from(
            ["TURN", "Task", "conversation", ""]))
        count = len(spans) + draw(st.sampled_from([0, 0, 0, 1]))  # 1: a span never sent
        envelope = Sp(MAIN, ENVELOPE, "invoke_agent planner", BASE, [
            ("context.id", CID), ("context.scope", sent), ("context.span_count", count),
            ("gen_ai.agent.name", "planner")])
        envelope.bad = needs_repair(ATTRIBUTES["context.scope"], sent)
        scope = None if envelope.bad else sent
        spans.insert(0, envelope)
    copies = draw(st.lists(st.sampled_from(spans), max_size=2))  # retries: the same span again
    foreign = [replace(s, trace=OTHER) for s in draw(st.lists(st.sampled_from(spans),
                                                              max_size=2))]
    spans = draw(st.permutations([*spans, *copies, *foreign]))
    return Scenario(list(spans), selected, omitted, segment, scope)


# -- the two paths ---------------------------------------------------------------------------------


def _any(v: Any) -> AnyValue:
    out = AnyValue()
    if isinstance(v, KvList):
        out.kvlist_value.SetInParent()
        for key, inner in v.items():
            out.kvlist_value.values.add(key=key).value.CopyFrom(_any(inner))
    elif isinstance(v, bytes):
        out.bytes_value = v
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int):
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v
    else:
        out.array_value.SetInParent()
        for element in v:
            out.array_value.values.append(_any(element))
    return out


def _kvs(attrs: list[tuple[str, Any]]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in attrs]


def otlp_span(sp: Sp) -> Span:
    s = Span(trace_id=sp.trace.to_bytes(16, "big"), span_id=sp.span_id.to_bytes(8, "big"),
             name=sp.name, start_time_unix_nano=sp.start, end_time_unix_nano=sp.start + 500)
    if sp.parent is not None:
        s.parent_span_id = sp.parent.to_bytes(8, "big")
    s.attributes.extend(_kvs(sp.attrs))
    for ev in sp.events:
        s.events.add(name=ev.name, time_unix_nano=ev.time).attributes.extend(_kvs(ev.attrs))
    return s


def _py(v: Any) -> Any:
    """A value as the SDK holds it: dicts, bytes and NaN kept, sequences as tuples."""
    if isinstance(v, KvList):
        return dict(v)
    if isinstance(v, list):
        return tuple(_py(e) for e in v)
    return v


def readable_span(sp: Sp) -> ReadableSpan:
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = None if sp.parent is None else SpanContext(sp.trace, sp.parent, False, flags)
    return ReadableSpan(
        sp.name, context=SpanContext(sp.trace, sp.span_id, False, flags), parent=parent,
        attributes={k: _py(v) for k, v in sp.attrs}, start_time=sp.start,
        end_time=sp.start + 500,
        events=[Event(ev.name, {k: _py(v) for k, v in ev.attrs}, timestamp=ev.time, limit=None)
                for ev in sp.events])


def via_processor(sc: Scenario) -> dict[int, dict[str, Any]]:
    """(a): decode as the processor does, rebuild per (trace, context id): trace -> bundle."""
    body = request([otlp_span(s) for s in sc.spans], service=SERVICE).SerializeToString()
    decoded = decode_request(body, parse_protobuf(body))
    assert decoded.rejected == 0, decoded.error_message()
    assert len(decoded.accepted) == len(sc.spans)
    assert bool(decoded.repairs) == bool(decoded.problems)
    groups: dict[tuple[str, str], list[Any]] = {}
    for accepted in decoded.accepted:
        assert accepted.context_id == CID
        groups.setdefault((accepted.view.trace_id, accepted.context_id), []).append(
            accepted.view)
    return {int(trace, 16): rebuild_envelope(views) for (trace, _), views in groups.items()}


def in_process(sc: Scenario) -> dict[str, Any]:
    """(b): SDK spans, one group per context id, as BundleSpanProcessor keeps them."""
    views = [view_from_readable_span(readable_span(s)) for s in sc.spans]
    (bundle,) = rebuild(views)
    again = rebuild_envelope(list(reversed(views)))  # arrival order does not matter
    assert orjson.dumps(again) == orjson.dumps(bundle)
    return bundle


# -- what every bundle must satisfy ----------------------------------------------------------------


def _walk(node: Any, path: str = "$") -> Any:
    if isinstance(node, dict):
        for key, inner in node.items():
            yield from _walk(inner, f"{path}.{key}")
    elif isinstance(node, (list, tuple)):
        for i, inner in enumerate(node):
            yield from _walk(inner, f"{path}[{i}]")
    yield path, node


def check_bundle(bundle: dict[str, Any], spans: list[Sp]) -> None:
    """The invariants of any bundle; ``spans`` are those of its group."""
    for path, node in _walk(bundle):
        assert not isinstance(node, float) or math.isfinite(node), (path, node)
        if path.endswith(("_at", "occurred_at")) and isinstance(node, str):
            assert not node.startswith("1970"), (path, node)  # every span starts in 2027
    doc = orjson.loads(orjson.dumps(bundle))  # what a sink writes
    errors = [e.message for e in VALIDATOR.iter_errors(doc)]
    assert not errors, errors

    for m in measure(bundle):
        assert math.isfinite(m.value), m
        for i, label in enumerate(m.labels):
            members = ENUM_LABELS.get((m.name, i))
            if members is not None:
                assert label in members or label in ("custom", "unknown"), m

    info = bundle["rebuild"]
    repairs = info.get("repairs", [])
    if info["status"] == "complete":
        assert not repairs and not info.get("partial_reasons"), info
        assert info["received_spans"] >= info["expected_spans"], info
    else:
        assert info["partial_reasons"], info
    if repairs:
        assert info["status"] == "partial" and "repaired" in info["partial_reasons"]
    if any(s.bad for s in spans):
        assert repairs, "a value that needs a repair was sent, none is listed"
    bad = {f"{s.span_id:016x}" for s in spans if s.bad}
    for r in repairs:  # and a well-formed value is never repaired
        # (two well-formed off spans may reuse a record id: the later record is left out,
        # a duplicate_id repair, which is about the envelope, not a value)
        assert r["kind"] in ("foreign_trace", "duplicate_id") or r["span_id"] in bad, r
    traces = {ref["trace_id"] for ref in bundle["context_envelope"]["telemetry_refs"]}
    assert len(traces) == 1
    if len({s.trace for s in spans}) > 1:
        assert any(r["kind"] == "foreign_trace" for r in repairs)


def check_records_kept(bundle: dict[str, Any], sc: Scenario) -> None:
    """The well-formed records are in the bundle, unless their span is listed as left out
    (another trace's envelope won: in process, a span of the other trace may come first)."""
    left_out = {r["span_id"] for r in bundle["rebuild"].get("repairs", [])
                if r["kind"] == "foreign_trace"}
    (trace,) = {int(ref["trace_id"], 16) for ref in bundle["context_envelope"]["telemetry_refs"]}

    def kept(span_id: int) -> bool:
        if any(s.span_id == span_id and s.trace == trace for s in sc.spans):
            return True
        assert f"{span_id:016x}" in left_out, (span_id, bundle["rebuild"])
        return False

    if kept(SELECTION):
        (sel,) = [s for s in bundle["context_selections"] if s["selection_id"] == "sel-good"]
        for item in sc.selected:
            assert item in sel["selected_item_refs"] and item in sel["candidate_item_refs"]
            assert item in bundle["context_envelope"]["item_refs"]
        for item, reason in sc.omitted:
            assert {"item_id": item, "reason": reason} in sel["omitted_item_refs"]
        items = {i["item_id"] for i in bundle["context_items"]}
        assert {*sc.selected, *(i for i, _ in sc.omitted)} <= items
    if kept(BUDGET):
        (budget,) = [b for b in bundle["context_budgets"] if b["budget_id"] == "bud-good"]
        assert sc.segment in budget["window_segments"]


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@PROPERTY
@given(sc=scenarios())
def test_off_spec_spans_make_valid_bundles_on_both_paths(sc: Scenario) -> None:
    by_trace = via_processor(sc)
    for trace, bundle in by_trace.items():
        group = [s for s in sc.spans if s.trace == trace]
        check_bundle(bundle, group)
        if trace == MAIN:
            check_records_kept(bundle, sc)
            if sc.scope is not None and not any(
                    "context.scope" in dict(s.attrs) for s in group if s.span_id != ENVELOPE):
                assert bundle["context_envelope"]["scope"] == sc.scope
    assert MAIN in by_trace

    local = in_process(sc)
    check_bundle(local, sc.spans)
    check_records_kept(local, sc)

    if set(by_trace) == {MAIN}:
        # the same spans give the same bundle whatever carried them; a kvlist or bytes value
        # is told apart only in the words of its repair (what it decoded to, and its type)
        opaque = any(_opaque(v) for s in sc.spans
                     for _, v in [*s.attrs, *(a for e in s.events for a in e.attrs)])
        assert _comparable(by_trace[MAIN], opaque) == _comparable(local, opaque)


def _opaque(v: Any) -> bool:
    return isinstance(v, (KvList, bytes)) or isinstance(v, list) and any(map(_opaque, v))


def _comparable(bundle: dict[str, Any], opaque: bool) -> Any:
    doc = orjson.loads(orjson.dumps(bundle))
    if opaque and "repairs" in doc["rebuild"]:
        doc["rebuild"]["repairs"] = [{k: r.get(k) for k in ("kind", "field", "span_id", "event")}
                                     for r in doc["rebuild"]["repairs"]]
    return doc


def test_the_cli_validates_a_sample_of_generated_bundles(tmp_path: Path) -> None:
    sample: list[dict[str, Any]] = []

    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(sc=scenarios())
    def collect(sc: Scenario) -> None:
        sample.extend(via_processor(sc).values())
        sample.append(in_process(sc))

    collect()
    assert len(sample) >= 50
    good = tmp_path / "generated.jsonl"
    good.write_bytes(b"".join(orjson.dumps(b) + b"\n" for b in sample))
    cli = [sys.executable, "-m", "otel_agent_context", "validate"]
    result = subprocess.run([*cli, str(good)], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # the same command does fail on what the boundary exists to prevent
    bad = tmp_path / "bad.jsonl"
    broken = orjson.loads(orjson.dumps(sample[0]))
    broken["context_budgets"] = [{"budget_id": "b", "window_segments": [{}]}]
    bad.write_bytes(orjson.dumps(broken) + b"\n")
    result = subprocess.run([*cli, str(bad)], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert result.returncode == 1 and "window_segments[0]" in result.stdout, result.stdout
