#!/usr/bin/env python3
"""Generate docs/contract.md from semconv/registry.yaml.

    python3 scripts/gen_contract_docs.py           # write docs/contract.md
    python3 scripts/gen_contract_docs.py --check   # exit 1 if docs/contract.md is out of date

The registry is the source; the docs are tables of it. ``tests/test_registry.py`` compares
the committed docs with :func:`render` so the two cannot drift.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "semconv" / "registry.yaml"
DOCS = ROOT / "docs" / "contract.md"
REGISTRY_LINK = "../semconv/registry.yaml"


# ---------------------------------------------------------------------------------------
# reading the registry


def load(path: Path = REGISTRY) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


class Registry:
    """Groups of the registry, indexed; attribute refs resolved against the definitions."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.groups: list[dict[str, Any]] = data["groups"]
        self.by_id = {g["id"]: g for g in self.groups}
        self.attributes: dict[str, dict[str, Any]] = {}
        for g in self.groups:
            for a in g.get("attributes", ()):
                if "id" in a:
                    self.attributes[a["id"]] = a
        #: reused OpenTelemetry names: ref -> the ref entry of ``attributes.context.reused``
        self.reused: dict[str, dict[str, Any]] = {
            a["ref"]: a for a in self.by_id.get("attributes.context.reused", {}).get(
                "attributes", ())}

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [g for g in self.groups if g["type"] == kind]

    def registry_groups(self) -> list[dict[str, Any]]:
        return [g for g in self.of_type("attribute_group") if g["id"].startswith("registry.")]

    def group_attributes(self, group: dict[str, Any]) -> list[dict[str, Any]]:
        """The attributes of a span/event/attribute group: ``extends`` first, then its own
        (a ref of its own overrides an inherited one). Each entry is the ref merged over
        the definition, with ``name`` set."""
        out: dict[str, dict[str, Any]] = {}
        parent = group.get("extends")
        if parent:
            for a in self.group_attributes(self.by_id[parent]):
                out[a["name"]] = a
        for a in group.get("attributes", ()):
            name = a.get("ref") or a["id"]
            merged = dict(self.attributes.get(name) or self.reused.get(name) or {})
            merged.pop("ref", None)
            merged.update({k: v for k, v in a.items() if k != "ref"})
            merged["name"] = name
            out[name] = merged
        return list(out.values())

    def spans(self) -> list[dict[str, Any]]:
        return self.of_type("span")

    def events(self) -> list[dict[str, Any]]:
        return self.of_type("event")

    def metrics(self) -> list[dict[str, Any]]:
        return self.of_type("metric")

    def records_of(self, group: dict[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
        """record -> [(field, attribute, requirement)] a span/event group carries: its
        ``annotations.record`` (and its ``extends`` parent's), each attribute checked to be
        one the group carries."""
        out: dict[str, list[tuple[str, str, str]]] = {}
        parent = group.get("extends")
        if parent:
            out.update(self.records_of(self.by_id[parent]))
        levels = {a["name"]: requirement(a.get("requirement_level"))
                  for a in self.group_attributes(group)}
        for record, fields in (annotations(group).get("record") or {}).items():
            rows = []
            for field, attribute in fields.items():
                if attribute not in levels:
                    raise SystemExit(f"{group['id']}: record {record}.{field} names "
                                     f"{attribute}, which the group does not carry")
                rows.append((field, attribute, levels[attribute]))
            out[record] = rows
        return out

    def records(self) -> dict[str, dict[tuple[str, str], tuple[str, list[str]]]]:
        """record -> (field, attribute) -> (requirement, where it is carried), over every
        span and event group, in registry order."""
        out: dict[str, dict[tuple[str, str], tuple[str, list[str]]]] = {}
        for group in self.events() + self.spans():
            where = group.get("name") or span_name(group)
            for record, rows in self.records_of(group).items():
                for field, attribute, level in rows:
                    entry = out.setdefault(record, {}).setdefault((field, attribute),
                                                                  (level, []))
                    entry[1].append(where)
        return out


def requirement(level: Any) -> str:
    """A requirement level's name (conditionally_required without its condition)."""
    if isinstance(level, dict):
        return str(next(iter(level)))
    return str(level or "recommended")


def span_name(group: dict[str, Any]) -> str:
    return str(group["id"]).removeprefix("span.")


def annotations(node: dict[str, Any]) -> dict[str, Any]:
    return node.get("annotations") or {}


def is_content(attr: dict[str, Any]) -> bool:
    return bool(annotations(attr).get("content"))


def enum_values(attr: dict[str, Any]) -> list[str] | None:
    t = attr.get("type")
    if isinstance(t, dict):
        return [str(m["value"]) for m in t["members"]]
    members = annotations(attr).get("array_members")
    return [str(m) for m in members] if members else None


# ---------------------------------------------------------------------------------------
# formatting


def cell(text: Any) -> str:
    s = " ".join(str(text).split())
    return s.replace("|", "\\|")


def code(name: str) -> str:
    return f"`{name}`"


def fmt_type(attr: dict[str, Any]) -> str:
    t = attr.get("type")
    if t is None:
        return "OpenTelemetry's"
    if isinstance(t, dict):
        return "string (enum)"
    if annotations(attr).get("array_members"):
        return f"{t} (enum values)"
    minimum = annotations(attr).get("minimum")
    if minimum is not None:  # a count: the boundary drops what is below
        return f"{t} (≥ {minimum})"
    return str(t)


def fmt_req(level: Any) -> str:
    if level is None:
        return "recommended"
    if isinstance(level, str):
        return level.replace("_", "-")
    ((key, cond),) = level.items()
    return f"{key.replace('_', ' ')}: {cond}"


def attr_name(attr: dict[str, Any]) -> str:
    name = attr["name"]
    t = attr.get("type")
    if isinstance(t, str) and t.startswith("template["):
        suffix = ".<system>.<field>" if name == "context.source.native" else ".<name>"
        return code(name + suffix)
    return code(name)


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return lines


def attribute_rows(attrs: list[dict[str, Any]]) -> list[list[str]]:
    return [[attr_name(a), fmt_type(a), fmt_req(a.get("requirement_level")),
             "yes" if is_content(a) else "no", a.get("brief", "")] for a in attrs]


ATTR_HEADER = ("Attribute", "Type", "Requirement", "Content", "Brief")


def notes_of(attrs: list[dict[str, Any]], *, with_values: bool) -> list[str]:
    lines = []
    for a in attrs:
        values = enum_values(a) if with_values else None
        if values:
            lines.append(f"- {code(a['name'])} values: " + ", ".join(code(v) for v in values))
        if a.get("note"):
            lines.append(f"- {code(a['name'])}: {cell(a['note'])}")
    return lines


# ---------------------------------------------------------------------------------------
# sections


def _intro(version: str) -> list[str]:
    return [
        f"# Telemetry contract v{version}: spans, events, attributes, metrics",
        "",
        "<!-- Generated by scripts/gen_contract_docs.py from semconv/registry.yaml. "
        "Do not edit by hand. -->",
        "",
        "This page is the wire contract of otel-agent-context in table form. It is generated "
        f"from the machine-readable registry [`semconv/registry.yaml`]({REGISTRY_LINK}) "
        "(OpenTelemetry semantic-conventions YAML); edit the registry and run "
        "`python3 scripts/gen_contract_docs.py`. `tests/test_registry.py` fails when this page, "
        "the registry, `otel_agent_context/_semconv.py`, `otel_agent_context/_enums.py` and "
        "what the emitter writes disagree.",
        "",
        "- The project's names live under `context.*`. OpenTelemetry's own names (`gen_ai.*`, "
        "`mcp.*`, `user.id`, `error.type`) are reused, never redefined: "
        "[reused attributes](#reused-opentelemetry-attributes).",
        "- Every name has stability `development`. Requirement levels are OpenTelemetry's: "
        "required, conditionally required, recommended, opt-in. Enum values are exactly the "
        "spec's.",
        "- **Content** = yes: the attribute may hold user or model text. It is recorded only "
        "when content capture is on (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` = "
        "`SPAN_ONLY` or `SPAN_AND_EVENT`), and never for items whose sensitivity the configured "
        "policy blocks (those get a `context.redaction.applied` event). Digests are always "
        "recorded. In the registry: `annotations: {content: true}`.",
        "- Refs are `string[]` of `kind:id` (e.g. `session:sess_42f1`). Times are RFC 3339 "
        "strings.",
        "- Names the project added beyond the contract v0.1 document are listed in "
        "[Changes from the contract v0.1 document](#changes-from-the-contract-v01-document); "
        "changes of behaviour in [Change notes](#change-notes).",
        "- Which attribute carries which field of the standard's records: "
        "[Records](#records). The same mapping is generated into "
        "`otel_agent_context/_table.py` (`python3 scripts/gen_table.py`), which the emitter, "
        "the rebuild, the processor, the metrics and the dashboards read.",
        "",
    ]


def _spans(reg: Registry) -> list[str]:
    out = ["## Spans", "", "All context spans are `INTERNAL` and carry `context.id`.", ""]
    rows = []
    for g in reg.spans():
        classes = annotations(g).get("spec_event_classes") or {}
        spec = " / ".join(f"{k}: {code(v)}" for k, v in classes.items()) or "-"
        rows.append([code(span_name(g)), g.get("span_kind", ""),
                     ", ".join(code(e) for e in g.get("events", ())) or "-", spec])
    gi = reg.by_id.get("attributes.context.gen_ai_inference")
    if gi is not None:
        rows.append([annotations(gi).get("applies_to", ""), annotations(gi).get("span_kind", ""),
                     ", ".join(code(e) for e in annotations(gi).get("events", ())), "-"])
    out += table(("Span", "Kind", "Span events on it", "Spec event classes (start / end)"),
                 rows)
    out.append("")
    for g in reg.spans():
        out += [f"### {code(span_name(g))}", "", cell(g["brief"]), ""]
        if g.get("note"):
            out += [cell(g["note"]), ""]
        out += table(ATTR_HEADER, attribute_rows(reg.group_attributes(g)))
        out += _ref_notes(g, "span") + [""]
    if gi is not None:
        out += [f"### {annotations(gi).get('applies_to')} (additions)", "", cell(gi["brief"]),
                "", cell(gi.get("note", "")), ""]
        out += table(ATTR_HEADER, attribute_rows(reg.group_attributes(gi))) + [""]
    return out


def _attributes(reg: Registry) -> list[str]:
    out = ["## Attributes", ""]
    for g in reg.registry_groups():
        section = annotations(g).get("contract_section")
        where = f", contract §{section}" if section else ""
        out += [f"### {g['display_name']} ({code(g['id'])}{where})", "", cell(g["brief"]), ""]
        attrs = reg.group_attributes(g)
        out += table(("Attribute", "Type", "Requirement (default)", "Content", "Brief"),
                     attribute_rows(attrs))
        notes = notes_of(attrs, with_values=True)
        out += ([""] + notes if notes else []) + [""]
    reused = reg.by_id.get("attributes.context.reused")
    if reused is not None:
        out += ["### Reused OpenTelemetry attributes", "", cell(reused["brief"]), "",
                cell(reused.get("note", "")), ""]
        out += table(("Attribute", "Type", "Content", "Used for"),
                     [[code(a["ref"]), annotations(a).get("wire_type", "string"),
                       "yes" if is_content(a) else "", a.get("brief", "")]
                      for a in reused["attributes"]])
        out.append("")
    return out


def _events(reg: Registry) -> list[str]:
    on: dict[str, list[str]] = {}
    for g in reg.spans():
        for e in g.get("events", ()):
            on.setdefault(e, []).append(code(span_name(g)))
    gi = reg.by_id.get("attributes.context.gen_ai_inference")
    if gi is not None:
        for e in annotations(gi).get("events", ()):
            on.setdefault(e, []).append(str(annotations(gi).get("applies_to")))
    out = ["## Span events", "",
           "Item events (marked below) count toward the limit of 100 item events a span; the "
           "rest move to `context.items` child spans.", ""]
    out += table(("Event", "On spans", "Item event", "Brief"),
                 [[code(g["name"]), ", ".join(on.get(g["name"], ())) or "-",
                   "yes" if annotations(g).get("item_event") else "no", g["brief"]]
                  for g in reg.events()])
    out.append("")
    for g in reg.events():
        out += [f"### {code(g['name'])}", "", cell(g["brief"]), ""]
        if g.get("note"):
            out += [cell(g["note"]), ""]
        out += table(ATTR_HEADER, attribute_rows(reg.group_attributes(g)))
        out += _ref_notes(g, "event") + [""]
    return out


def _ref_notes(group: dict[str, Any], what: str) -> list[str]:
    """Notes a span or event puts on the attributes it references."""
    notes = [f"- {code(a['ref'])} on this {what}: {cell(a['note'])}"
             for a in group.get("attributes", ()) if "ref" in a and a.get("note")]
    return [""] + notes if notes else []


def _records(reg: Registry) -> list[str]:
    out = ["## Records", "",
           "For every record of the standard that telemetry carries: its fields, the "
           "attribute of each, and where that attribute is carried. A value enters a bundle "
           "only through the boundary: an enum value is matched ignoring case, an unknown one "
           "becomes `custom` where the enum has it (else it is dropped), a number that is not "
           "finite is dropped, an event lacking an attribute it must carry is dropped alone, "
           "an event without a time takes its span's start; every such change is listed in "
           "the bundle's `rebuild.repairs` and makes the bundle `partial` (reason "
           "`repaired`).", ""]
    for record, fields in reg.records().items():
        out += [f"### {code(record)}", ""]
        rows = []
        for (field, attribute), (level, where) in fields.items():
            attr = reg.attributes.get(attribute) or reg.reused.get(attribute) or {}
            values = enum_values(attr)
            rows.append([code(field), code(attribute), fmt_type(attr) if attr else "string",
                         ", ".join(code(v) for v in values) if values else "-",
                         "yes" if is_content(attr) else "", fmt_req(level),
                         ", ".join(code(w) for w in where)])
        out += table(("Field", "Attribute", "Type", "Values", "Content", "Requirement",
                      "On"), rows)
        out.append("")
    return out


def _metrics(reg: Registry) -> list[str]:
    out = ["## Metrics", "",
           "Two sources serve the same metrics, with the same names, units, buckets and "
           "labels: the processor derives them from rebuilt envelopes (an agent that only "
           "sends traces gets them too; scrape its `/metrics`), and the agent-side "
           "instruments of `AgentContext` record them in process (export them with your "
           "OpenTelemetry metrics pipeline when no processor runs). Use one source per agent: "
           "the compose stack scrapes only the processor and its agents export no metrics, so "
           "nothing is counted twice. Data-point attributes are the short label names below, "
           "taken from the attribute in parentheses; never an id of any kind; a label taken "
           "from an enum carries only its values, `custom` or `unknown`. Histograms carry "
           "trace-id exemplars.", ""]
    rows = []
    for g in reg.metrics():
        prom = annotations(g)["prometheus"]
        labels = []
        for lab in prom["labels"]:
            src = lab.get("from")
            if src:
                labels.append(f"`{lab['name']}` ({code(src)})")
            else:
                values = ", ".join(code(v) for v in lab.get("values", ()))
                labels.append(f"`{lab['name']}` ({values})")
        buckets = ", ".join(str(b) for b in annotations(g).get("buckets", ())) or "-"
        rows.append([code(g["metric_name"]), code(prom["name"]), g["instrument"],
                     code(g["unit"]), ", ".join(labels), buckets, g["brief"]])
    out += table(("OpenTelemetry name", "Prometheus name", "Instrument", "Unit", "Labels",
                  "Buckets", "Brief"), rows)
    out.append("")
    return out


def alerts(reg: Registry) -> dict[str, tuple[str, list[str]]]:
    """Alert name -> (brief, Prometheus names of the metrics it is built on)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for g in reg.metrics():
        prom_name = annotations(g)["prometheus"]["name"]
        for alert in annotations(g).get("alerts", ()):
            brief, metrics = out.setdefault(alert["name"], (alert["brief"], []))
            if brief != alert["brief"]:
                raise ValueError(f"alert {alert['name']}: briefs differ between metrics")
            metrics.append(prom_name)
    return out


def _alerts(reg: Registry) -> list[str]:
    out = ["## Alerts", "",
           "Alert rule names are part of the contract; thresholds are not "
           "(`dashboards/prometheus/rules/agent-context-alerts.yml`).", ""]
    out += table(("Alert", "Built on", "Fires on"),
                 [[code(name), ", ".join(code(m) for m in metrics), brief]
                  for name, (brief, metrics) in alerts(reg).items()])
    out.append("")
    return out


class Added:
    """A name, or a placement of names, added beyond the contract v0.1 document."""

    def __init__(self, name: str, kind: str, on: str, mark: dict[str, Any]) -> None:
        self.name, self.kind, self.on = name, kind, on
        self.spec_field: str = mark["spec_field"]
        self.why: str = mark["why"]


def added(reg: Registry) -> tuple[list[Added], list[Added]]:
    """Names added beyond the contract v0.1 document, and added placements of names."""
    names: list[Added] = []
    placements: list[Added] = []
    for name, a in reg.attributes.items():
        mark = annotations(a).get("added")
        if mark:
            names.append(Added(code(name), fmt_type(a), _where(reg, name), mark))
    for g in reg.spans() + reg.events():
        where = code(g.get("name") or span_name(g))
        mark = annotations(g).get("added")
        if mark and "placement" in mark:
            group = reg.by_id[mark["placement"]]
            what = f"{group['display_name']} ({code(group['id'])})"
            placements.append(Added(what, "", where, mark))
        elif mark:
            kind = "event" if g["type"] == "event" else "span"
            on = ", ".join(code(span_name(s)) for s in reg.spans()
                           if g.get("name") in s.get("events", ()))
            names.append(Added(where, kind, on, mark))
        for a in g.get("attributes", ()):
            if "ref" in a and annotations(a).get("added"):
                placements.append(Added(code(a["ref"]), "", where, annotations(a)["added"]))
    return names, placements


def _changes(reg: Registry) -> list[str]:
    names, placements = added(reg)
    out = ["## Changes from the contract v0.1 document", "",
           "The emitter and the rebuild carry spec fields that the v0.1 document had no "
           "name (or no place) for. Those added within schema version 0.1 are additive and "
           "optional, so v0.1 emitters and readers stay valid; contract v0.2 added the folded "
           "form of a model call (see the change notes), which a v0.1 reader does not know. "
           "In the registry they carry `annotations.added`.", "",
           "### Added names", ""]
    out += table(("Name", "Type", "On", "Spec field", "Why"),
                 [[a.name, a.kind, a.on, a.spec_field, a.why] for a in names])
    out += ["", "### Added placements of existing names", ""]
    out += table(("Names", "Now also on", "Spec field", "Why"),
                 [[a.name, a.on, a.spec_field, a.why] for a in placements])
    out.append("")
    return out


def _change_notes(reg: Registry) -> list[str]:
    notes = annotations(reg.by_id["registry.context"]).get("change_notes") or []
    out = ["## Change notes", "",
           "Changes of the contract's behaviour, newest first (`annotations.change_notes` of "
           "`registry.context`).", ""]
    out += table(("Version", "Change", "Why"),
                 [[n["version"], n["change"], n["why"]] for n in notes])
    out.append("")
    return out


def _where(reg: Registry, name: str) -> str:
    places = []
    for g in reg.spans() + reg.events():
        if any(a["name"] == name for a in reg.group_attributes(g)):
            places.append(code(g.get("name") or span_name(g)))
    return ", ".join(places)


def render(data: dict[str, Any]) -> str:
    reg = Registry(data)
    version = str(annotations(reg.by_id["registry.context"]).get("contract_version", "0.1"))
    lines = (_intro(version) + _spans(reg) + _attributes(reg) + _events(reg) + _records(reg)
             + _metrics(reg) + _alerts(reg) + _change_notes(reg) + _changes(reg))
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def write_or_check(argv: list[str] | None, description: str, out: Path, script: str,
                   render_text: Any) -> int:
    """The command line of a generator: write ``out``, or with ``--check`` exit 1 when the
    committed file differs from what the registry gives."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {out.relative_to(ROOT)} differs from the registry")
    args = parser.parse_args(argv)
    text = render_text()
    if args.check:
        current = out.read_text(encoding="utf-8") if out.exists() else ""
        if current != text:
            print(f"{out.relative_to(ROOT)} is out of date: run scripts/{script}",
                  file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, __doc__.splitlines()[0], DOCS, Path(__file__).name,
                          lambda: render(load()))


if __name__ == "__main__":
    sys.exit(main())
