"""The registry (semconv/registry.yaml), the constants, the enums, the docs and the emitter agree.

(a) every ``context.*`` attribute, span and event constant of ``_semconv`` is in the registry
    and vice versa (templates such as ``context.selection.signal.<name>`` by their prefix);
    reused OpenTelemetry names are referenced, not defined;
(b) enum members equal ``_enums``;
(c) content-marked attributes equal ``CONTENT_ATTRIBUTES``;
(d) metrics equal ``PROMETHEUS_NAMES`` / ``METRIC_LABELS`` (and what the API records);
(e) docs/contract.md is what scripts/gen_contract_docs.py generates now;
(f) every attribute and event the emitter writes (the demo agent, and a run that calls every
    recorder with every argument) is registered, on the span or event it is registered for,
    with the registered type.
"""

from __future__ import annotations

import enum
import importlib.util
import inspect
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from otel_agent_context import AgentContext
from otel_agent_context import _enums as E
from otel_agent_context import _semconv as S
from otel_agent_context import _table as T
from otel_agent_context._demo_agent import run_demo
from otel_agent_context._folded import fold_call
from otel_agent_context._records import ContextItem, ContextSourceRef
from otel_agent_context.adapters import _abi as abi  # writes the context.runtime.* names
from otel_agent_context.instrumentation._common import make_block
from otel_agent_context.testing import CapturedTelemetry

ROOT = Path(__file__).resolve().parent.parent
REGISTRY_PATH = ROOT / "semconv" / "registry.yaml"
V01_NAMES_PATH = ROOT / "semconv" / "contract-v0.1-names.txt"
DOCS_PATH = ROOT / "docs" / "contract.md"


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_contract_docs", ROOT / "scripts" / "gen_contract_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()
DATA = GEN.load(REGISTRY_PATH)
REG = GEN.Registry(DATA)

# ---------------------------------------------------------------------------------------
# the two sides


_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+\.?$")


def _constants() -> dict[str, str]:
    """Module-level name constants of _semconv (not the schema version or URL)."""
    return {k: v for k, v in vars(S).items()
            if k.isupper() and isinstance(v, str) and _NAME.match(v)}


CONSTS = _constants()
SPAN_CONSTS = {v for k, v in CONSTS.items() if k.startswith("SPAN_")}
EVENT_CONSTS = {v for k, v in CONSTS.items() if k.startswith("EVENT_")}
METRIC_CONSTS = {v for k, v in CONSTS.items() if k.startswith("METRIC_")}
_ATTR_CONSTS = {v for k, v in CONSTS.items()
                if v.startswith("context.") and not k.startswith(("SPAN_", "EVENT_", "METRIC_"))}
TEMPLATE_CONSTS = {v for v in _ATTR_CONSTS if v.endswith(".")}
ATTR_CONSTS = _ATTR_CONSTS - TEMPLATE_CONSTS
REUSED_CONSTS = {v for v in CONSTS.values() if not v.startswith("context.")}


def _is_template(attr: dict[str, Any]) -> bool:
    t = attr.get("type")
    return isinstance(t, str) and t.startswith("template[")


REG_TEMPLATES = {name for name, a in REG.attributes.items() if _is_template(a)}
REG_ATTRS = set(REG.attributes) - REG_TEMPLATES
REG_SPANS = {GEN.span_name(g): g for g in REG.spans()}
REG_EVENTS = {g["name"]: g for g in REG.events()}
REG_METRICS = {g["metric_name"]: g for g in REG.metrics()}
REUSED_GROUP = REG.by_id["attributes.context.reused"]
REG_REUSED = {a["ref"] for a in REUSED_GROUP["attributes"]}
INFERENCE_GROUP = REG.by_id["attributes.context.gen_ai_inference"]


def _all_refs() -> Iterable[tuple[str, str]]:
    for g in REG.groups:
        for a in g.get("attributes", ()):
            if "ref" in a:
                yield g["id"], a["ref"]


# ---------------------------------------------------------------------------------------
# registry shape


def test_registry_is_well_formed() -> None:
    ids = [g["id"] for g in REG.groups]
    assert len(ids) == len(set(ids)), "duplicate group ids"
    defined: list[str] = [a["id"] for g in REG.groups for a in g.get("attributes", ())
                          if "id" in a]
    assert len(defined) == len(set(defined)), "an attribute is defined twice"
    for name, a in REG.attributes.items():
        assert name.startswith("context."), f"{name}: only context.* names are defined here"
        for key in ("type", "brief", "stability", "examples", "requirement_level"):
            assert key in a, f"{name}: no {key}"
        assert a["stability"] == "development", name
        assert isinstance(a["examples"], list) and a["examples"], name
    for g in REG.spans() + REG.events() + REG.metrics():
        assert g.get("stability") == "development", g["id"]
        assert g.get("brief"), g["id"]
    for g in REG.spans():
        assert g["id"] == "span." + GEN.span_name(g)
        assert g["span_kind"] == "internal", g["id"]
    for g in REG.events():
        assert g["id"] == "event." + g["name"]
    for g in REG.metrics():
        assert g["id"] == "metric." + g["metric_name"]


def test_every_ref_resolves() -> None:
    dangling = [(gid, ref) for gid, ref in _all_refs()
                if ref not in REG.attributes and ref not in REG_REUSED]
    assert not dangling, f"refs to names neither defined nor listed as reused: {dangling}"
    for g in REG.groups:
        if g.get("extends"):
            assert g["extends"] in REG.by_id, g["id"]
    for g in REG.spans():
        for e in g.get("events", ()):
            assert e in REG_EVENTS, f"{g['id']}: unknown event {e}"
    for e in GEN.annotations(INFERENCE_GROUP)["events"]:
        assert e in REG_EVENTS


def test_no_attribute_is_the_namespace_of_another() -> None:
    names = sorted(REG.attributes)
    clashes = [(a, b) for a in names for b in names
               if b.startswith(a + ".") and a not in REG_TEMPLATES]
    assert not clashes


# ---------------------------------------------------------------------------------------
# (a) constants <-> registry


def test_attributes_match_semconv() -> None:
    assert not (REG_ATTRS - ATTR_CONSTS), "in the registry, not in _semconv"
    assert not (ATTR_CONSTS - REG_ATTRS), "in _semconv, not in the registry"


def test_templates_match_semconv_prefixes() -> None:
    assert {t + "." for t in REG_TEMPLATES} == TEMPLATE_CONSTS


def test_spans_match_semconv() -> None:
    assert set(REG_SPANS) == SPAN_CONSTS


def test_events_match_semconv() -> None:
    assert set(REG_EVENTS) == EVENT_CONSTS


def test_reused_names_match_semconv() -> None:
    assert REG_REUSED == REUSED_CONSTS
    assert set(S.ENVELOPE_REUSED) <= {a["name"] for a in
                                      REG.group_attributes(REG_SPANS[S.SPAN_ENVELOPE])}
    native = REG.attributes[S.SOURCE_NATIVE_PREFIX.rstrip(".")]
    assert GEN.annotations(native)["reused_native_ids"] == S.NATIVE_REUSED


def test_item_events_match_semconv() -> None:
    marked = {n for n, g in REG_EVENTS.items() if GEN.annotations(g).get("item_event")}
    assert marked == S.ITEM_EVENTS
    assert set(REG_SPANS[S.SPAN_ITEMS]["events"]) == S.ITEM_EVENTS


def test_added_names_are_exactly_those_beyond_the_v01_document() -> None:
    lines = V01_NAMES_PATH.read_text(encoding="utf-8").splitlines()
    v01 = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    names = set(REG.attributes) | set(REG_SPANS) | set(REG_EVENTS)
    assert not (v01 - names), "names of the v0.1 document missing from the registry"
    marks = {n: GEN.annotations(a).get("added") for n, a in REG.attributes.items()}
    marks |= {n: GEN.annotations(g).get("added") for n, g in {**REG_SPANS, **REG_EVENTS}.items()
              if "placement" not in (GEN.annotations(g).get("added") or {})}
    marked = {n for n, mark in marks.items() if mark}
    assert names - v01 == marked, "a name beyond the v0.1 document needs annotations.added"
    for n in marked:
        assert marks[n]["spec_field"] and marks[n]["why"], n
    listed, placements = GEN.added(REG)
    assert {a.name.strip("`") for a in listed} == marked
    assert all(a.spec_field and a.why for a in placements)


def test_table_is_generated_from_the_registry() -> None:
    """The one table (otel_agent_context/_table.py) is what scripts/gen_table.py makes now."""
    spec = importlib.util.spec_from_file_location("gen_table", ROOT / "scripts" / "gen_table.py")
    assert spec is not None and spec.loader is not None
    gen_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_table)
    assert (ROOT / "otel_agent_context" / "_table.py").read_text(encoding="utf-8") == \
        gen_table.render(), "otel_agent_context/_table.py is stale: run scripts/gen_table.py"


def test_table_types_are_the_registry_types() -> None:
    for name, a in REG.attributes.items():
        t = a["type"]
        spec = T.TEMPLATES[name + "."] if _is_template(a) else T.ATTRIBUTES[name]
        want = "string" if isinstance(t, dict) else (t[len("template["):-1] if _is_template(a)
                                                      else t)
        assert spec.type == want, name
        assert spec.members == tuple(GEN.enum_values(a) or ()), name
        assert spec.content == GEN.is_content(a), name
    assert set(T.ATTRIBUTES) == (REG_ATTRS | REG_REUSED)


def test_every_record_field_names_a_registered_attribute_of_its_record() -> None:
    from otel_agent_context import _records as R

    for record, fields in T.RECORDS.items():
        cls_name = record.split(".")[0]
        cls = getattr(R, cls_name)
        for f in fields:
            assert f.attribute in T.ATTRIBUTES, (record, f)
            if "." not in record:  # ContextEvent.metadata holds strings by name
                assert f.field in cls.__struct_fields__, (record, f.field)


def test_event_required_attributes_are_required_in_the_registry() -> None:
    for event, spec in T.EVENTS.items():
        levels = {a["name"]: a.get("requirement_level")
                  for a in REG.group_attributes(REG_EVENTS[event])}
        for needs in spec.required:
            for name in needs:
                level = levels.get(name)
                if len(needs) == 1:
                    assert level == "required", f"{event}: {name} is {level}"
                else:
                    assert isinstance(level, dict) and "conditionally_required" in level, event


# ---------------------------------------------------------------------------------------
# (b) enums


_ENUMS = {name: cls for name, cls in vars(E).items()
          if isinstance(cls, type) and issubclass(cls, enum.Enum) and cls.__module__ == E.__name__}


def test_enum_members_equal_python_enums() -> None:
    used = set()
    for name, a in REG.attributes.items():
        t = a["type"]
        py = GEN.annotations(a).get("python_enum")
        if isinstance(t, dict):
            assert py in _ENUMS, f"{name}: enum without annotations.python_enum"
            members = t["members"]
            assert [m["value"] for m in members] == [m.value for m in _ENUMS[py]], name
            for m in members:
                assert m["id"] == m["value"] and m.get("stability") == "development", name
            used.add(py)
        elif GEN.annotations(a).get("array_members"):
            assert t == "string[]", name
            assert py in _ENUMS, name
            assert GEN.annotations(a)["array_members"] == [m.value for m in _ENUMS[py]], name
            used.add(py)
        else:
            assert py is None, f"{name}: python_enum on a non-enum attribute"
    # every spec enum but the event classes and the rebuild status types an attribute
    assert set(_ENUMS) - used == {"EventClass", "RebuildStatus"}


def test_spec_event_classes_and_rebuild_status() -> None:
    classes = {m.value for m in E.EventClass}
    for g in REG.spans():
        for cls in (GEN.annotations(g).get("spec_event_classes") or {}).values():
            assert cls in classes, g["id"]
    (status,) = [lab for lab in GEN.annotations(REG_METRICS[S.METRIC_ENVELOPES])["prometheus"]
                 ["labels"] if lab["name"] == "status"]
    assert status["values"] == [m.value for m in E.RebuildStatus]


def test_runtime_rules_are_listed() -> None:
    rule = REG.attributes["context.runtime.rule"]
    assert re.findall(r"`([a-z_]+)`", rule["note"]) == list(abi.RULES)
    assert {level for level, _ in abi.RULES.values()} <= set(
        REG.attributes["context.runtime.rule_level"]["examples"])


# ---------------------------------------------------------------------------------------
# (c) content


def test_content_attributes_match() -> None:
    marked = {n for n, a in REG.attributes.items() if GEN.is_content(a)}
    assert marked == S.CONTENT_ATTRIBUTES
    for n in marked:
        a = REG.attributes[n]
        assert a["requirement_level"] == "opt_in", n
        assert a["note"].startswith("Content:"), n
    for gid, ref in _all_refs():
        if ref in S.CONTENT_ATTRIBUTES:
            level = next(a for a in REG.by_id[gid]["attributes"] if a.get("ref") == ref)
            assert level["requirement_level"] == "opt_in", f"{gid}: {ref} must be opt_in"


# ---------------------------------------------------------------------------------------
# (d) metrics


def _prometheus(metric: dict[str, Any]) -> dict[str, Any]:
    return GEN.annotations(metric)["prometheus"]  # type: ignore[no-any-return]


def test_metrics_match_semconv() -> None:
    assert set(REG_METRICS) == METRIC_CONSTS
    assert {n: _prometheus(g)["name"] for n, g in REG_METRICS.items()} == S.PROMETHEUS_NAMES
    assert {n: tuple(lab["name"] for lab in _prometheus(g)["labels"])
            for n, g in REG_METRICS.items()} == S.METRIC_LABELS


def test_prometheus_names_follow_the_otel_translation() -> None:
    for name, g in REG_METRICS.items():
        prom = _prometheus(g)
        assert prom["type"] == g["instrument"], name
        base = name.replace(".", "_")
        if g["unit"] == "1":
            assert prom["name"] == base + "_ratio", name
        elif g["instrument"] == "counter":
            assert prom["name"] == base + "_total", name
        for lab in prom["labels"]:
            assert not lab["name"].endswith("id"), f"{name}: an id label"
            src = lab.get("from")
            assert src is None or src in REG.attributes or src in REG_REUSED, (name, src)


def test_alert_names_match_semconv() -> None:
    assert set(GEN.alerts(REG)) == set(S.ALERT_NAMES)
    for alert, (_, metrics) in GEN.alerts(REG).items():
        assert set(metrics) <= set(S.PROMETHEUS_NAMES.values()), alert


# ---------------------------------------------------------------------------------------
# (e) docs


def test_docs_are_generated_from_the_registry() -> None:
    expected = GEN.render(DATA)
    actual = DOCS_PATH.read_text(encoding="utf-8")
    assert actual == expected, (
        "docs/contract.md is out of date: run python3 scripts/gen_contract_docs.py")


def test_docs_list_every_name() -> None:
    text = DOCS_PATH.read_text(encoding="utf-8")
    for name in (set(REG.attributes) | set(REG_SPANS) | set(REG_EVENTS) | set(REG_METRICS)
                 | set(S.PROMETHEUS_NAMES.values()) | set(S.ALERT_NAMES) | REG_REUSED):
        assert f"`{name}" in text, name


# ---------------------------------------------------------------------------------------
# (f) what the emitter writes


_PY_TYPES: dict[str, Any] = {
    "string": str, "int": int, "double": float, "boolean": bool,
    "template[string]": str, "template[double]": float,
}


def _resolve(key: str, allowed: set[str]) -> str | None:
    """The registry name ``key`` is an instance of (itself, or a template), if allowed."""
    if key in allowed:
        return key
    for t in REG_TEMPLATES:
        if key.startswith(t + ".") and t in allowed:
            return t
    return None


def _type_problem(name: str, value: Any) -> str | None:
    a = REG.attributes.get(name)
    if a is None:  # a reused OpenTelemetry name: its own conventions type it
        return None
    t = a["type"]
    if isinstance(t, dict):
        members = [m["value"] for m in t["members"]]
        return None if value in members else f"{value!r} is not a member"
    if t == "int[]":
        ok = isinstance(value, (tuple, list)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
        return None if ok else f"{value!r} is not an int[]"
    if t == "string[]":
        if not (isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)):
            return f"{value!r} is not a string[]"
        members = GEN.annotations(a).get("array_members")
        parallel = bool(GEN.annotations(a).get("folds"))  # "" says: none for this element
        bad = [v for v in value if members and v not in members and not (parallel and v == "")]
        return f"{bad} not members" if bad else None
    py = _PY_TYPES[t]
    if py is int and isinstance(value, bool):
        return f"{value!r} is a boolean, registered as int"
    return None if isinstance(value, py) else f"{value!r} is not {t}"


def _check(spans: Iterable[Any]) -> tuple[list[str], set[str], set[str], set[str]]:
    """Problems, and the registry attribute names, event names and span names seen."""
    problems: list[str] = []
    seen_attrs: set[str] = set()
    seen_events: set[str] = set()
    seen_spans: set[str] = set()
    inference_attrs = {a["name"] for a in REG.group_attributes(INFERENCE_GROUP)}
    inference_events = set(GEN.annotations(INFERENCE_GROUP)["events"])

    def attrs(where: str, items: Iterable[tuple[str, Any]], allowed: set[str],
              only_context: bool) -> None:
        for key, value in items:
            if only_context and not key.startswith("context."):
                continue
            name = _resolve(key, allowed)
            if name is None:
                registered = _resolve(key, set(REG.attributes)) or key in REG_REUSED
                problems.append(f"{where}: {key} " + (
                    "is registered, but not here" if registered else "is not registered"))
                continue
            seen_attrs.add(name)
            problem = _type_problem(name, value)
            if problem:
                problems.append(f"{where}: {key}: {problem}")

    for span in spans:
        group = REG_SPANS.get(span.name)
        if group is not None:
            seen_spans.add(span.name)
            allowed = {a["name"] for a in REG.group_attributes(group)}
            events_here = set(group.get("events", ()))
            attrs(f"span {span.name}", span.attributes.items(), allowed, only_context=False)
        else:
            events_here = inference_events
            attrs(f"span {span.name}", span.attributes.items(), inference_attrs,
                  only_context=True)
        for ev in span.events:
            if not ev.name.startswith("context."):
                continue
            ev_group = REG_EVENTS.get(ev.name)
            if ev_group is None:
                problems.append(f"event {ev.name} on {span.name} is not registered")
                continue
            seen_events.add(ev.name)
            if ev.name not in events_here:
                problems.append(f"event {ev.name} is not registered on span {span.name}")
            allowed = {a["name"] for a in REG.group_attributes(ev_group)}
            attrs(f"event {ev.name}", ev.attributes.items(), allowed, only_context=False)
    return sorted(set(problems)), seen_attrs, seen_events, seen_spans


@pytest.fixture(scope="module")
def demo_run() -> Any:
    tel = CapturedTelemetry(capture_content=True)
    try:
        # The demo's own AgentContext would read the capture switch from the environment;
        # hand it the capturing one so content attributes are written too.
        run_demo(tel.tracer_provider, turns=6, agent_context=tel.agent_context)
        yield tel.spans(), tel.metric_reader.get_metrics_data()
    finally:
        tel.shutdown()


def test_demo_writes_only_registered_names(demo_run: Any) -> None:
    spans, _ = demo_run
    problems, seen, events, names = _check(spans)
    assert not problems, "\n".join(problems)
    assert S.ITEM_CONTENT in seen and S.SELECTION_QUERY in seen, "content was not captured"
    assert S.SELECTION_SIGNAL_PREFIX.rstrip(".") in seen
    assert S.SPAN_ENVELOPE in names and S.EVENT_INJECTION_APPLIED in events


def _exercise_everything(tel: CapturedTelemetry) -> None:
    """Every recorder, every argument: the emitter writes every name it knows."""
    src = ContextSourceRef(
        source_id="src_1", uri="kb://policies/refunds.md", source_kind="knowledge_base",
        selector="line_range:12-18", digest="sha256:" + "0" * 64, authority="support-kb",
        provenance_refs=["document:doc_77"], license="CC-BY-4.0",
        retrieved_at="2026-11-04T09:12:30Z", modified_at="2026-10-01T00:00:00Z",
        external_mappings={"a2a.task_id": "task_77", **{k: f"native_{i}" for i, k in
                                                       enumerate(S.NATIVE_REUSED)}})
    item = ContextItem(
        item_id="kb:refunds:7", context_kind="document_excerpt", title="Refunds, section 7",
        content_mode="inline", content="Policy text.", content_ref="artifact://kb/7",
        mime_type="text/markdown", language="en", source_refs=[src], token_estimate=120,
        byte_size=480, freshness="current", trust_level="verified", sensitivity="internal",
        redaction_state="none", visibility=["model", "ui"], priority=3,
        created_at="2026-11-04T09:12:00Z")
    secret = ContextItem(item_id="vault:1", context_kind="policy_note", content="s3cr3t",
                         sensitivity="secret", token_estimate=5)
    ac = tel.agent_context
    with ac.envelope(scope="turn", parent_id="ctx_session", agent_name="agent", agent_id="a1",
                     conversation_id="conv_1", model="m", user_id="u1",
                     actor_refs=["user:u1"], runtime_refs=["turn:1"],
                     policy_refs=["policy:pii"], evidence_refs=["review:r1"]) as env:
        gap = env.missing(question="Which order?", needed_for="refund", severity="blocking",
                          candidate_sources=["user"], blocked_actions=["refund"],
                          requested_from="user", status="open", scope="turn")
        env.missing_requested(gap, requested_from="user")
        env.missing_resolved(gap, resolution_refs=["item:order:1"])
        with env.surface() as surface:
            surface.add(item)
            surface.add(secret)
            surface.update(item)
            for i in range(150):  # past 100 item events: a context.items span
                surface.add(f"filler:{i}", kind="session_history", token_estimate=1)
            surface.remove("filler:0")
        with pytest.raises(ValueError), env.surface():
            raise ValueError("boom")  # error.type on a stage span
        with env.budget(target="model", max_tokens=100, reserved_tokens=10, max_bytes=4096,
                        max_items=10, overflow_strategy="truncate_middle",
                        window_id="win_1") as budget:
            budget.segment("history", order=0, reserved_tokens=50, used_tokens=40)
            budget.truncated(item_id=item.item_id, strategy="truncate_middle",
                             tokens_before=120, tokens_after=30)
            budget.truncated(segment="history", strategy="truncate_tail", tokens_before=50,
                             tokens_after=40)
            budget.actual(tokens=120, bytes=2000, items=3)
        with env.selection(surface_id=surface.surface_id, intent="answer", query="refunds",
                           policy="relevance", rationale="fits", budget_id=budget.budget_id,
                           actor_ref="agent:agent", model_ref="model:reranker") as sel:
            sel.selected(item, rank=1, score=0.9, signals={"bm25": 12.0})
            sel.selected(ContextItem(item_id="kb:shipping", context_kind="document_excerpt",
                                     content="Orders ship within three business days."),
                         rank=2)  # no block carries it: selected, never injected
            sel.omitted("kb:old", reason="stale_source", detail="older than 90 days",
                        score=0.2, kind="document_excerpt", token_estimate=300)
        with env.compaction(method="rolling_summary", trigger="manual", scope="session",
                            validation="sampled_qa",
                            replacement_policy="replace_in_window") as comp:
            comp.source(item, covered=True)
            comp.source("msg:1", covered=False, token_estimate=40, kind="session_history")
            comp.summary(content="Summary.", token_estimate=10, refresh_policy="manual")
            comp.loss_note("an amount was lost")
        with env.assembly(target="model", budget_id=budget.budget_id,
                          wrapping_policy="xml_tags", separator_policy="blank_line",
                          redaction_state="none", visibility=["model"]) as asm:
            asm.block(item, injection_point="user_message_appendix")
            asm.block("msg:question", kind="user_message", source_item_refs=[item.item_id])
            if "describe" in inspect.signature(asm.block).parameters:
                asm.block(item, injection_point="user_message_appendix", describe=True)
        with tel.tracer.start_as_current_span("chat m") as chat:
            asm.inject(injection_point="message_history", span=chat, native_id="msg_1",
                       final_ref="request:r1", visibility=["model"])
            env.mark_compacted(chat)
        # contract v0.2's folded form: an instrumented model call on its one inference span,
        # with every array (content: the run captures it)
        with tel.tracer.start_as_current_span("chat folded") as call:
            blocks = [
                make_block("system:1", "system_prompt", "Be brief.", True, "system_prompt",
                           "system_prompt"),
                make_block("resource:1", "external_resource", "See the policy.", True,
                           "message_history", "message_history", content_mode="resource_link",
                           content_ref="kb://policies/refunds.md", tool_call_id="call_1",
                           response_id="resp_1"),
                make_block("user:1", "user_message", "Policy text. Refunds?", True,
                           "message_history", "message_history")]
            folded = fold_call(env, call, max_tokens=1000, reserved_tokens=100,
                               overflow_strategy="truncate_middle",
                               segments=[("system_prompt", 0, None, 3), ("output", 1, 100, None)],
                               blocks=blocks, sources=[(), (), (item.item_id,)], capture=True)
            folded.truncated(segment="message_history", strategy="truncate_middle",
                             tokens_before=900, tokens_after=800)
            folded.actual(tokens=950, items=3)
            folded.stop()
    breaches = [abi.RuleBreach(rule, "messages.jsonl", f"{rule} breached")
                for rule in abi.RULES]
    abi.emit_rule_breaches("/nonexistent/session", "agent", "sess_1", breaches, ac)
    # events as log records: the envelope span counts them (context.event_count)
    logs_mode = AgentContext(tracer_provider=tel.tracer_provider,
                             meter_provider=tel.meter_provider,
                             logger_provider=tel.logger_provider, events_as="logs")
    with logs_mode.envelope(scope="turn", agent_name="agent") as env, env.surface() as surface:
        surface.add(item)


@pytest.fixture(scope="module")
def full_run() -> Any:
    tel = CapturedTelemetry(capture_content=True)
    try:
        _exercise_everything(tel)
        yield tel.spans(), tel.metric_reader.get_metrics_data()
    finally:
        tel.shutdown()


def test_full_run_writes_exactly_the_registry(full_run: Any) -> None:
    spans, _ = full_run
    problems, seen, events, names = _check(spans)
    assert not problems, "\n".join(problems)
    expected_attrs, expected_events = set(REG.attributes), set(REG_EVENTS)
    assert not (expected_attrs - seen), "registered but never written"
    assert not (expected_events - events), "events registered but never written"
    assert not (set(REG_SPANS) - names), "spans registered but never written"
    reused_seen = {k for s in spans for k in s.attributes if k in REG_REUSED}
    reused_seen |= {k for s in spans for e in s.events for k in e.attributes if k in REG_REUSED}
    assert set(S.NATIVE_REUSED.values()) | set(S.ENVELOPE_REUSED) | {S.ERROR_TYPE} <= reused_seen


def test_recorded_metrics_match_the_registry(full_run: Any, demo_run: Any) -> None:
    seen = set()
    for _, data in (full_run, demo_run):
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    g = REG_METRICS.get(metric.name)
                    assert g is not None, f"{metric.name} is not registered"
                    assert metric.unit == g["unit"], metric.name
                    kind = type(metric.data).__name__
                    assert {"Sum": "counter", "Histogram": "histogram"}[kind] == g["instrument"]
                    labels = {lab["name"] for lab in _prometheus(g)["labels"]}
                    for point in metric.data.data_points:
                        assert set(point.attributes) == labels, metric.name
                    seen.add(metric.name)
    assert seen == set(REG_METRICS), f"never recorded: {set(REG_METRICS) - seen}"
