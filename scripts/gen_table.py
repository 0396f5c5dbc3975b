#!/usr/bin/env python3
"""Generate otel_agent_context/_table.py (the contract as one table) from semconv/registry.yaml.

    python3 scripts/gen_table.py           # write the module
    python3 scripts/gen_table.py --check   # exit 1 if the committed module is out of date

Adding a field is one registry edit (the attribute, and the field under the group's
``annotations.record``) and a run of this script; ``tests/test_registry.py`` fails while the
module is stale.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from string import Template
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "scripts" / "templates" / "_table.py.tmpl"
OUT = ROOT / "otel_agent_context" / "_table.py"


def _docs_module() -> Any:
    spec = importlib.util.spec_from_file_location("gen_contract_docs",
                                                  ROOT / "scripts" / "gen_contract_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS = _docs_module()


def _type(attr: dict[str, Any]) -> str:
    t = attr.get("type")
    if isinstance(t, dict):
        return "string"
    if t is None:  # a reused OpenTelemetry name: the registry states its wire type
        return str(DOCS.annotations(attr).get("wire_type", "string"))
    if isinstance(t, str) and t.startswith("template["):
        return t[len("template["):-1]
    return str(t)


def _attribute(name: str, attr: dict[str, Any]) -> str:
    members = tuple(DOCS.enum_values(attr) or ())
    minimum = DOCS.annotations(attr).get("minimum")
    return (f"AttributeSpec({name!r}, {_type(attr)!r}, {members!r}, {'custom' in members!r}, "
            f"{DOCS.is_content(attr)!r}" + (f", {minimum!r})" if minimum is not None else ")"))


def _fields(rows: list[tuple[str, str, str]]) -> str:
    return "(" + "".join(f"FieldSpec{row!r}, " for row in rows) + ")"


def _records_literal(records: dict[str, list[tuple[str, str, str]]], indent: str) -> str:
    if not records:
        return "{}"
    inner = "".join(f"{indent}    {name!r}: {_fields(rows)},\n"
                    for name, rows in records.items())
    return "{\n" + inner + indent + "}"


def render() -> str:
    data = DOCS.load()
    reg = DOCS.Registry(data)
    attributes = templates = ""
    for name, attr in reg.attributes.items():
        t = attr.get("type")
        if isinstance(t, str) and t.startswith("template["):
            templates += f"    {name + '.'!r}: {_attribute(name, attr)},\n"
        else:
            attributes += f"    {name!r}: {_attribute(name, attr)},\n"
    for name, ref in reg.reused.items():
        attributes += f"    {name!r}: {_attribute(name, ref)},\n"

    events = spans = ""
    for group in reg.events():
        records = reg.records_of(group)
        required: list[tuple[str, ...]] = []
        alternatives: list[str] = []
        for a in reg.group_attributes(group):
            level = DOCS.requirement(a.get("requirement_level"))
            if level == "required":
                required.append((a["name"],))
            elif level == "conditionally_required" and DOCS.annotations(a).get("one_of"):
                alternatives.append(a["name"])
        if alternatives:
            required.append(tuple(alternatives))
        item_event = bool(DOCS.annotations(group).get("item_event"))
        events += (f"    {group['name']!r}: EventSpec({group['name']!r}, {tuple(required)!r}, "
                   f"{item_event!r}, {_records_literal(records, '    ')}),\n")
    for group in reg.spans():
        name = DOCS.span_name(group)
        records = reg.records_of(group)
        spans += f"    {name!r}: SpanSpec({name!r}, {_records_literal(records, '    ')}),\n"
    records_text = "".join(
        f"    {record!r}: {_fields([(f, a, lv) for (f, a), (lv, _) in fields.items()])},\n"
        for record, fields in reg.records().items())

    metrics = ""
    for group in reg.metrics():
        ann = DOCS.annotations(group)
        prom = ann["prometheus"]
        buckets = tuple(float(b) for b in ann["buckets"]) if "buckets" in ann else None
        if (buckets is None) != (group["instrument"] != "histogram"):
            raise SystemExit(f"{group['id']}: a histogram needs annotations.buckets, "
                             "a counter has none")
        labels = tuple((lab["name"], lab.get("from", "")) for lab in prom["labels"])
        brief = " ".join(group["brief"].split())
        metrics += (f"    {group['metric_name']!r}: MetricSpec({group['metric_name']!r}, "
                    f"{group['instrument']!r}, {group['unit']!r}, {brief!r}, "
                    f"{buckets!r}, {prom['name']!r}, {labels!r}),\n")

    folded = ""
    for name, attr in reg.attributes.items():
        folds = DOCS.annotations(attr).get("folds")
        if folds:
            folded += (f"    {name!r}: FoldedSpec({folds['record']!r}, {folds['field']!r}, "
                       f"{folds.get('parallel_to', '')!r}),\n")

    version = DOCS.annotations(reg.by_id["registry.context"]).get("contract_version", "0.1")
    return Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
        contract_version=repr(str(version)), attributes=attributes, templates=templates,
        records=records_text, events=events, spans=spans, metrics=metrics,
        folded=folded)


def main(argv: list[str] | None = None) -> int:
    return int(DOCS.write_or_check(argv, __doc__.splitlines()[0], OUT, Path(__file__).name,
                                   render))


if __name__ == "__main__":
    sys.exit(main())
