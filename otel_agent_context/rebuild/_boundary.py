"""The boundary: everything that enters a rebuild passes here, whatever carried it.

OTLP spans in the processor, SDK spans in process and hand-built span views alike. After it,
every value the rebuild reads has the contract's type and, where the contract has an enum,
one of its values; before it, nothing is trusted. What it cannot keep it drops alone (an
attribute, an event), never the span around it, and every change is a :class:`Repair` the
bundle lists in its ``rebuild`` block and the processor counts and reports to the sender.

The rules, all from the one table (``_table``):

- an enum value is matched ignoring case; an unknown one becomes ``custom`` where the enum
  has it (the original is in the repair), else the attribute is dropped;
- a number that is not finite is dropped; an int outside 64 bits is dropped; a whole double
  where an int is due, and an int where a double is due, are taken as they are (JavaScript
  encoders send whole numbers either way);
- a value of the wrong type is converted when nothing is lost (a number or bool where a
  free-form string is due, a numeric string where a number is due, one string where a
  string array is due), else dropped;
- an attribute OpenTelemetry types ``any`` (the GenAI messages) is text as it came, or the
  JSON text of a structured value: either form, one bundle, nothing to say;
- a repair shows what it received only when that is short and not content: else its type
  and size (it goes to serve's log and back to the sender);
- an event lacking an attribute it must carry (its id, say) is dropped alone;
- an event without a time takes its span's start;
- a key repeated in one OTLP attribute list takes its last occurrence; a span id sent again
  with other content keeps its first sighting (both said, never silent);
- the parallel arrays of the folded form keep their positions: an element that cannot be
  kept becomes empty (``""``, or -1 in an int array) rather than shifting the rest, and each
  array is cut or padded to the length of the array it runs parallel to, and a position
  whose id is empty (a block or segment lacking it) is dropped from every array.

Checking one attribute is a pure function of its name and value, so the processor caches it
by the attribute's encoding.
"""

from __future__ import annotations

import base64
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from .._table import ATTRIBUTES, EVENTS, FOLDED, TEMPLATES, AttributeSpec
from ._view import EventView, SpanView

__all__ = [
    "ANY_TYPED",
    "DROP",
    "PARALLEL_KEYS",
    "PLAIN_INT",
    "PLAIN_TEXT",
    "REPAIRED",
    "REPAIR_KINDS",
    "TOO_DEEP",
    "Repair",
    "check_attribute",
    "check_event",
    "normalize_attributes",
    "normalize_view",
    "parallel_arrays",
    "repair_json",
    "same_span",
    "shown",
    "shown_value",
]

#: Kinds of repair: the ``kind`` label of ``context_processor_repairs_total``.
TYPE = "type"
ENUM_CASE = "enum_case"
ENUM_CUSTOM = "enum_custom"
ENUM_DROPPED = "enum_dropped"
NON_FINITE = "non_finite"
EVENT_DROPPED = "event_dropped"
EVENT_TIME = "event_time"
SPAN_TIME = "span_time"
FOREIGN_TRACE = "foreign_trace"
DUPLICATE_KEY = "duplicate_key"
DUPLICATE_SPAN = "duplicate_span"
DUPLICATE_ID = "duplicate_id"
TEXT = "text"
ARRAY_LENGTH = "array_length"
#: an OTLP/JSON value nested deeper than protobuf parsers read (the processor)
TOO_DEEP = "too_deep"
REPAIR_KINDS = (TYPE, ENUM_CASE, ENUM_CUSTOM, ENUM_DROPPED, NON_FINITE, EVENT_DROPPED,
                EVENT_TIME, SPAN_TIME, FOREIGN_TRACE, DUPLICATE_KEY, DUPLICATE_SPAN, DUPLICATE_ID,
                TEXT, ARRAY_LENGTH, TOO_DEEP)

#: The partial reason of a bundle the boundary changed anything of.
REPAIRED = "repaired"

#: check_attribute's value when the attribute is to be dropped.
DROP: Any = object()

_INT64 = (-(1 << 63), (1 << 63) - 1)
#: a received value longer than this (as text) is shown by its type and size alone
_MAX_SHOWN = 64
_CONTEXT = "context."
#: counts, token figures and ratios: a value below the table's minimum (0) is dropped (an
#: element of a folded array becomes -1, "not given")
_COUNTS = frozenset(name for name, spec in ATTRIBUTES.items() if spec.minimum is not None)


class Repair(NamedTuple):
    """One change the boundary made: what it received and what it did."""

    kind: str
    field: str  # the attribute, or the event name for an event dropped or re-dated
    received: str  # the value received, as text: its type and size alone if long or content
    action: str
    span_id: str = ""
    event: str = ""  # the event the attribute was on, if it was on one


def repair_json(repair: Repair) -> dict[str, str]:
    """A repair as the bundle's ``rebuild.repairs`` lists it."""
    out = {"kind": repair.kind, "field": repair.field, "received": repair.received,
           "action": repair.action}
    if repair.span_id:
        out["span_id"] = repair.span_id
    if repair.event:
        out["event"] = repair.event
    return out


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _size(value: Any, text: str | None = None) -> str:
    """A value's type and size, which is all a repair says of a long or content value."""
    if isinstance(value, str):
        return f"text of {_count(len(value), 'character', 'characters')}"
    if isinstance(value, (list, tuple)):
        return f"array of {_count(len(value), 'element', 'elements')}"
    if isinstance(value, dict):
        return f"map of {_count(len(value), 'entry', 'entries')}"
    try:
        size = len(text if text is not None else repr(value))
    except ValueError:  # an int of more than 4,300 digits (in process) has no repr
        return f"{type(value).__name__} too large to show"
    return f"{type(value).__name__} of {_count(size, 'character', 'characters')}"


def _shown(value: Any) -> str:
    """A received value as a repair says it: as it came when short, else its type and size
    (a long value may be anyone's text: the repair goes to serve's log and to the sender)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except ValueError:
        return f"<{_size(value)}>"
    return text if len(text) <= _MAX_SHOWN else f"<{_size(value, text)}, not shown>"


def shown(key: str, value: Any) -> str:
    """As ``_shown``, and never the text of a content attribute, however short."""
    spec = _spec(key)
    return shown_value(value, spec is not None and spec.content)


def shown_value(value: Any, content: bool) -> str:
    return f"<content not shown: {_size(value)}>" if content else _shown(value)


def _spec(key: str) -> AttributeSpec | None:
    spec = ATTRIBUTES.get(key)
    if spec is None and key.startswith(_CONTEXT):
        for prefix, template in TEMPLATES.items():
            if key.startswith(prefix):
                return template
    return spec


#: enum attribute -> {lowercased member: member}
_FOLDED = {name: {m.lower(): m for m in spec.members}
           for name, spec in (*ATTRIBUTES.items(), *TEMPLATES.items()) if spec.members}
_WORDS = {"string": "a string", "int": "an int", "double": "a double", "boolean": "a bool",
          "string[]": "a string array", "int[]": "an int array", "any": "a JSON value"}
#: the folded form's parallel arrays: an element is blanked, never removed (positions count)
_PARALLEL = frozenset(FOLDED)
#: parallel array -> the array that sets its length
_ANCHOR = {name: spec.parallel_to for name, spec in FOLDED.items() if spec.parallel_to}
_ANCHORS = tuple(name for name, spec in FOLDED.items() if not spec.parallel_to)
#: the id of each folded record -> the array of its folded positions ("" for none)
_BUDGET_ID, _ASSEMBLY_ID, _INJECTION_ID = ("context.budget.id", "context.assembly.id",
                                           "context.injection.id")
_MARKS = {_BUDGET_ID: "context.window.segment_names",
          _ASSEMBLY_ID: "context.assembly.block_item_ids", _INJECTION_ID: ""}
_SOURCE_COUNTS = "context.assembly.block_source_counts"
_SOURCE_REFS = "context.assembly.block_source_item_refs"
#: the attributes whose presence makes ``parallel_arrays`` look at a span (without any of
#: them it returns the attributes as they are)
PARALLEL_KEYS = frozenset({*_PARALLEL, _SOURCE_REFS})

#: (value or DROP, (kind, action) or None)
Checked = tuple[Any, "tuple[str, str] | None"]


def _enum(key: str, spec: AttributeSpec, value: str) -> Checked:
    if value in spec.members:
        return value, None
    if not value:  # an empty value says nothing: as if it were not sent
        return DROP, (ENUM_DROPPED, "empty: dropped")
    member = _FOLDED[key].get(value.lower())
    if member is not None:
        return member, (ENUM_CASE, f"matched ignoring case: {member}")
    if spec.has_custom:
        return "custom", (ENUM_CUSTOM, "not a value of the enum: recorded as custom")
    return DROP, (ENUM_DROPPED, "not a value of the enum: dropped")


def _wrong(spec: AttributeSpec, value: Any) -> Checked:
    got = "a list" if isinstance(value, (list, tuple)) else type(value).__name__
    return DROP, (TYPE, f"must be {_WORDS[spec.type]}, got {got}: dropped")


def _number(spec: AttributeSpec, value: Any) -> Checked:
    """An int or double attribute."""
    as_int = spec.type == "int"
    converted: tuple[str, str] | None = None
    if isinstance(value, str):
        try:
            value = int(value) if as_int else float(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return _wrong(spec, value)
        converted = (TYPE, f"a numeric string: converted to {_WORDS[spec.type]}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _wrong(spec, value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return DROP, (NON_FINITE, "not a finite number: dropped")
        if as_int:
            if not value.is_integer():
                return DROP, (TYPE, "must be an int, got a fraction: dropped")
            value = int(value)
    elif not as_int:
        value = float(value)
    if as_int and not _INT64[0] <= value <= _INT64[1]:
        return DROP, (TYPE, "an int beyond 64 bits: dropped")
    return value, converted


#: how much an array's repair says: the worst change names its kind (a value lost, then
#: one recorded as custom, then a conversion, then a case folded)
_RANK = {NON_FINITE: 0, ENUM_DROPPED: 0, ENUM_CUSTOM: 1, TYPE: 2, ENUM_CASE: 3}
_LOST = ("dropped", "emptied")
_SHOWN_CHANGES = 4
_SHOWN_POSITIONS = 8


def _said(whole: tuple[str, str] | None,
          changes: list[tuple[int, str, str]]) -> tuple[str, str] | None:
    """One repair for an array, from what was done to the whole and to each element
    (position, kind, action): every distinct change with the positions it touched, and the
    kind of the worst (a repair saying only its last element's change hid the others: a
    value made ``custom`` behind a case folded, a fraction dropped behind ints taken)."""
    if not changes:
        return whole
    groups: dict[str, tuple[str, list[int]]] = {}
    for position, kind, action in changes:
        groups.setdefault(action, (kind, []))[1].append(position)

    def rank(kind: str, action: str) -> int:
        return 0 if action.endswith(_LOST) else _RANK.get(kind, 2)

    candidates = [(k, a) for a, (k, _) in groups.items()]
    if whole is not None:
        candidates.insert(0, whole)
    kind = min(candidates, key=lambda ka: rank(ka[0], ka[1]))[0]
    parts = [whole[1]] if whole is not None else []
    for action, (_, positions) in list(groups.items())[:_SHOWN_CHANGES]:
        shown = ", ".join(map(str, positions[:_SHOWN_POSITIONS]))
        if len(positions) > _SHOWN_POSITIONS:
            shown += f", … ({len(positions)} in all)"
        parts.append(f"element{'s' if len(positions) > 1 else ''} {shown}: {action}")
    if len(groups) > _SHOWN_CHANGES:
        parts.append(f"and {len(groups) - _SHOWN_CHANGES} other changes")
    return kind, "; ".join(parts)


def _strings(key: str, spec: AttributeSpec, value: Any) -> Checked:
    """A string[] attribute (its elements checked against the enum, if it has one)."""
    whole: tuple[str, str] | None = None
    if isinstance(value, str):
        value, whole = [value], (TYPE, "one string where an array is due: made a list")
    elif not isinstance(value, (list, tuple)):
        return _wrong(spec, value)
    parallel = key in _PARALLEL
    out = []
    changes: list[tuple[int, str, str]] = []
    for position, element in enumerate(value):
        change: tuple[str, str] | None = None
        if isinstance(element, (bool, int, float)) and not isinstance(element, str):
            if isinstance(element, float) and not math.isfinite(element):
                changes.append((position, NON_FINITE, "a non-finite element: dropped"))
                if parallel:
                    out.append("")
                continue
            if isinstance(element, int) and not _INT64[0] <= element <= _INT64[1]:
                changes.append((position, TYPE, "an element beyond 64 bits: dropped"))
                if parallel:
                    out.append("")
                continue
            element, change = str(element), (TYPE, "non-string elements: converted to text")
        elif not isinstance(element, str):
            if element is None and not parallel:  # an element with no value: it alone goes
                changes.append((position, TYPE, "an element with no value: dropped"))
                continue
            if not parallel:
                return _wrong(spec, value)
            change = (TYPE, "a non-string element: emptied")
            element = ""
        if spec.members and not (parallel and element == ""):
            checked, element_repair = _enum(key, spec, element)
            if element_repair is not None:
                change = element_repair
            if checked is DROP:
                if change is not None:
                    changes.append((position, *change))
                if parallel:
                    out.append("")
                continue
            element = checked
        if change is not None:
            changes.append((position, *change))
        out.append(element)
    repair = _said(whole, changes)
    if repair is None and isinstance(value, list):
        return value, None
    return (out if out or not value else DROP), repair


def _ints(key: str, spec: AttributeSpec, value: Any) -> Checked:
    """An int[] attribute: each element an int of 64 bits (a whole double or a numeric
    string taken as one); an element that is none becomes -1 in a parallel array."""
    whole: tuple[str, str] | None = None
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        value, whole = [value], (TYPE, "one value where an array is due: made a list")
    elif not isinstance(value, (list, tuple)):
        return _wrong(spec, value)
    parallel = key in _PARALLEL
    out: list[int] = []
    changes: list[tuple[int, str, str]] = []
    counts = spec.minimum is not None  # -1 is "not given"; below it, nothing is
    for position, element in enumerate(value):
        if type(element) is int and _INT64[0] <= element <= _INT64[1] and (
                not counts or element >= -1):
            out.append(element)
            continue
        checked, element_repair = _number(_INT_SPEC, element)
        if checked is not DROP and counts and checked < -1:
            checked, element_repair = DROP, (TYPE, "a negative count: dropped")
        changes.append((position, *(element_repair or (TYPE, "an element taken as an int"))))
        if checked is DROP:
            if parallel:
                out.append(-1)
            continue
        out.append(checked)
    repair = _said(whole, changes)
    if repair is None and isinstance(value, list):
        return value, None
    return (out if out or not value else DROP), repair


_INT_SPEC = AttributeSpec("", "int", (), False, False)


def _any(spec: AttributeSpec, value: Any) -> Checked:
    """An attribute OpenTelemetry types ``any`` (the GenAI messages, which the conventions
    want structured on spans and allow as JSON text): text kept as it came, anything else
    made its JSON text, so both forms give the rebuild the same."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, float) and not math.isfinite(value):
        return DROP, (NON_FINITE, "not a finite number: dropped")
    if value is None:
        return _wrong(spec, value)
    try:
        return orjson.dumps(value, default=_base64).decode(), None
    except orjson.JSONEncodeError:  # a set, an int beyond 64 bits (in process only)
        return DROP, (TYPE, f"must be {_WORDS[spec.type]}, got {type(value).__name__} "
                            "holding a value JSON cannot carry: dropped")


def _base64(value: Any) -> str:
    """Bytes in a structured value as the processor has them from OTLP: base64 text."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(type(value).__name__)


def check_attribute(key: str, value: Any, wire_kind: str | None = None) -> Checked:
    """One attribute against the table: (the value to keep or DROP, (kind, action) or None).

    ``wire_kind`` is the OTLP ``AnyValue`` oneof the value came as, when known: a kvlist or
    bytes is never a contract attribute's type, whatever text it decoded to.
    """
    spec = _spec(key)
    if spec is None:
        return value, None
    if spec.type == "any":
        return _any(spec, value)
    if wire_kind in ("kvlist_value", "bytes_value"):
        return DROP, (TYPE, f"must be {_WORDS[spec.type]}, got {wire_kind[:-6]}: dropped")
    if isinstance(value, int) and not isinstance(value, bool) and \
            not _INT64[0] <= value <= _INT64[1]:  # only in process: OTLP ints are 64-bit
        return DROP, (TYPE, "an int beyond 64 bits: dropped")
    kind = spec.type
    if kind == "string":
        if isinstance(value, str):
            if not value and key in _MARKS:  # a record under id "" is no record
                return DROP, (EVENT_DROPPED, "empty: dropped, and the record it names with "
                                             "it (no made-up id)")
            return _enum(key, spec, value) if spec.members else (value, None)
        if not isinstance(value, (int, float)):  # a list, a mapping, bytes, None: no text
            return _wrong(spec, value)
        if isinstance(value, float) and not math.isfinite(value):
            return DROP, (NON_FINITE, "not a finite number: dropped")
        text = str(value)
        converted = (TYPE, f"must be a string, got {type(value).__name__}: converted to text")
        if spec.members:  # an enum with custom takes it as an unknown value
            checked = _enum(key, spec, text)
            return checked if checked[1] is not None else (text, converted)
        return text, converted
    if kind in ("int", "double"):
        checked = _number(spec, value)
        if spec.minimum is not None and checked[0] is not DROP and checked[0] < spec.minimum:
            return DROP, (TYPE, "a negative count: dropped")
        return checked
    if kind == "boolean":
        return (value, None) if isinstance(value, bool) else _wrong(spec, value)
    if kind == "int[]":
        return _ints(key, spec, value)
    return _strings(key, spec, value)


#: Text attributes with no enum and no other rule: ``check_attribute`` keeps any non-empty
#: ``str`` of theirs as it came, with nothing to say (the decoder's shortcut for new ids).
PLAIN_TEXT = frozenset(name for name, spec in ATTRIBUTES.items()
                       if spec.type in ("string", "any") and not spec.members
                       and name not in _PARALLEL)
#: Attributes OpenTelemetry types ``any``: an OTLP array or kvlist of theirs is decoded
#: whole (the processor's ``decode_key_value``), a kvlist a dict, an array a list.
ANY_TYPED = frozenset(name for name, spec in ATTRIBUTES.items() if spec.type == "any")
#: Int attributes with no enum -> the lowest value ``check_attribute`` keeps as it came (an
#: OTLP int is 64-bit): from it up, nothing to say.
PLAIN_INT = {name: _INT64[0] if spec.minimum is None else spec.minimum
             for name, spec in ATTRIBUTES.items()
             if spec.type == "int" and not spec.members and name not in _PARALLEL}

#: attribute -> (the Python type a valid value has, its enum members or None): what
#: needs no further look (arrays and families always take the full check).
_FAST: dict[str, tuple[type, frozenset[str] | None]] = {
    name: ({"string": str, "any": str, "int": int, "double": float, "boolean": bool}[spec.type],
           frozenset(spec.members) if spec.members else None)
    for name, spec in ATTRIBUTES.items() if not spec.type.endswith("[]")}


def normalize_attributes(attributes: Mapping[str, Any], repairs: list[Repair], *,
                         span_id: str = "", event: str = "") -> Mapping[str, Any]:
    """``attributes`` checked: the same mapping when nothing needs a change (no copy), else
    a checked copy; each change appended to ``repairs``."""
    # The common case, decided inline (a call per attribute would cost more than the check):
    # every value already what the table wants.
    fast_get = _FAST.get
    low, high = _INT64
    number: Any
    for key, number in attributes.items():
        fast = fast_get(key)
        if fast is None:
            if key.startswith(_CONTEXT):  # a family or an array: the full check
                break
            continue  # not the contract's
        kind, members = fast
        if type(number) is not kind:
            break
        if members is not None:
            if number not in members:
                break
        elif kind is str:
            if not number and key in _MARKS:
                break
        elif kind is float:
            real: float = number  # type: ignore[assignment]
            if real - real != 0.0 or (real < 0.0 and key in _COUNTS):  # nan/inf: x - x is nan
                break
        elif kind is int:
            whole: int = number  # type: ignore[assignment]
            if not low <= whole <= high or (whole < 0 and key in _COUNTS):
                break
    else:
        return attributes
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        checked, repair = check_attribute(key, value)
        if repair is not None:
            repairs.append(Repair(repair[0], key, shown(key, value), repair[1], span_id, event))
        if checked is not DROP:
            out[key] = checked
    return out


_REQUIRED = {name: spec.required for name, spec in EVENTS.items()}


def check_event(name: str, attributes: Mapping[str, Any]) -> str | None:
    """Why an event must be dropped (an attribute it must carry is absent), or None."""
    required = _REQUIRED.get(name)
    if required is None:
        return None
    for alternatives in required:
        for key in alternatives:
            value = attributes.get(key)
            if value is not None and value != "":
                break
        else:
            return " or ".join(alternatives)
    return None


def dropped_event(name: str, lacking: str, span_id: str) -> Repair:
    return Repair(EVENT_DROPPED, name, "", f"lacks {lacking}: event dropped", span_id)


def undated_event(name: str, span_id: str) -> Repair:
    return Repair(EVENT_TIME, name, "0", "no time: dated at its span's start", span_id)


def normalize_events(events: Iterable[EventView], start: int, repairs: list[Repair],
                     span_id: str) -> list[EventView]:
    """The events to keep, with checked attributes and a time each."""
    kept = []
    for ev in events:
        attributes = normalize_attributes(ev.attributes, repairs, span_id=span_id,
                                          event=ev.name)
        lacking = check_event(ev.name, attributes)
        if lacking is not None:
            repairs.append(dropped_event(ev.name, lacking, span_id))
            continue
        time = ev.time_unix_nano
        if time and attributes is ev.attributes:
            kept.append(ev)  # nothing to change: no copy
            continue
        if not time:
            repairs.append(undated_event(ev.name, span_id))
            time = start
        kept.append(EventView(ev.name, time, attributes))
    return kept


def span_times(start: int, end: int, event_times: Iterable[int], span_id: str,
               repairs: list[Repair]) -> tuple[int, int]:
    """A span's start and end, made usable: a missing start is its first known time, an end
    missing or before the start is its last (a span never dated 1970 or ending before it
    began)."""
    if start and end >= start:
        return start, end
    known = [t for t in (*event_times, end, start) if t]
    fixed_start = start or (min(known) if known else 0)
    fixed_end = end if end >= fixed_start and end else max([fixed_start, *known])
    repairs.append(Repair(SPAN_TIME, "time", f"{start}..{end}",
                          f"missing or reversed span times: {fixed_start}..{fixed_end}",
                          span_id))
    return fixed_start, fixed_end


def normalize_view(view: SpanView) -> SpanView:
    """``view`` after the boundary (the same object, once; later calls do nothing)."""
    if view.checked:
        return view
    repairs: list[Repair] = list(view.repairs)
    view.start_time_unix_nano, view.end_time_unix_nano = span_times(
        view.start_time_unix_nano, view.end_time_unix_nano,
        (e.time_unix_nano for e in view.events), view.span_id, repairs)
    view.attributes = normalize_attributes(view.attributes, repairs, span_id=view.span_id)
    view.attributes = parallel_arrays(view.attributes, repairs, view.span_id)
    view.events = normalize_events(view.events, view.start_time_unix_nano, repairs,
                                   view.span_id)
    view.repairs = repairs
    view.checked = True
    return view


def parallel_arrays(attributes: Mapping[str, Any], repairs: list[Repair],
                    span_id: str) -> Mapping[str, Any]:
    """The folded form's arrays made to agree: each as long as the array it runs parallel
    to (cut, or padded with ``""`` / -1), dropped without it; the blocks' source counts
    and source ids dropped together unless the counts add up to the ids."""
    if PARALLEL_KEYS.isdisjoint(attributes):
        return attributes  # not the folded form: the common case, one set operation
    out: dict[str, Any] | None = None
    for mark, anchor in _MARKS.items():
        # the positions of a folded record without its id (none, or an empty one the check
        # dropped) go with it: they vanished without a word
        if anchor and anchor in attributes and mark not in attributes:
            if out is None:
                out = dict(attributes)
            repairs.append(Repair(EVENT_DROPPED, anchor, _shown(out.pop(anchor)),
                                  f"without {mark}: dropped", span_id))
    if out is not None:
        attributes = out
    for key, anchor in _ANCHOR.items():
        value = attributes.get(key)
        if value is None:
            continue
        length = attributes.get(anchor)
        if length is None:
            action = f"without {anchor}: dropped"
            fixed = None
        elif len(value) == len(length):
            continue
        else:
            n = len(length)
            pad = -1 if ATTRIBUTES[key].type == "int[]" else ""
            fixed = [*value[:n], *([pad] * (n - len(value)))]
            action = f"{len(value)} elements where {anchor} has {n}: made {n}"
        if out is None:
            out = dict(attributes)
        if fixed is None:
            del out[key]
        else:
            out[key] = fixed
        repairs.append(Repair(ARRAY_LENGTH, key, shown(key, value), action, span_id))
    current = attributes if out is None else out
    counts, refs = current.get(_SOURCE_COUNTS), current.get(_SOURCE_REFS)
    if (counts is None) != (refs is None) or (
            counts is not None and refs is not None
            and (any(c < 0 for c in counts) or sum(counts) != len(refs))):
        if out is None:
            out = dict(attributes)
        for key in (_SOURCE_COUNTS, _SOURCE_REFS):
            if key in out:
                repairs.append(Repair(ARRAY_LENGTH, key, _shown(out.pop(key)),
                                      "the blocks' source counts do not add up to the source "
                                      "ids: both dropped", span_id))
    current = attributes if out is None else out
    for anchor in _ANCHORS:
        names = current.get(anchor)
        if names and "" in names:
            out = _drop_unnamed(dict(current), anchor, repairs, span_id)
            current = out
    return attributes if out is None else out


def _drop_unnamed(attributes: dict[str, Any], anchor: str, repairs: list[Repair],
                  span_id: str) -> dict[str, Any]:
    """A block or segment without its id (an empty element of the array that names them):
    dropped from every array, as a block or segment event lacking it is dropped."""
    names = attributes[anchor]
    keep = [i for i, name in enumerate(names) if name != ""]
    # one repair for the array, however many positions (one each made a bundle 50 times
    # the size of the request that carried 40,000 empty ids)
    unnamed = [i for i, name in enumerate(names) if name == ""]
    where = (f"position {unnamed[0]} has" if len(unnamed) == 1
             else f"{len(unnamed)} positions have")
    repairs.append(Repair(EVENT_DROPPED, anchor, _shown(unnamed),
                          f"{where} no id: dropped from every parallel array", span_id))
    counts = attributes.get(_SOURCE_COUNTS) if anchor == _ANCHOR[_SOURCE_COUNTS] else None
    if counts is not None:
        refs = attributes[_SOURCE_REFS]
        starts = [0, *itertools.accumulate(counts)]  # linear: 10k blocks once took seconds
        attributes[_SOURCE_REFS] = [r for i in keep
                                    for r in refs[starts[i]:starts[i] + counts[i]]]
    for key, parallel_to in _ANCHOR.items():
        if parallel_to == anchor and key in attributes:
            values = attributes[key]
            attributes[key] = [values[i] for i in keep]
    attributes[anchor] = [names[i] for i in keep]
    return attributes


def foreign_trace(span: SpanView, trace_id: str) -> Repair:
    """A span carrying the envelope's ``context.id`` from another trace than the envelope's."""
    return Repair(FOREIGN_TRACE, "trace_id", span.trace_id,
                  f"an envelope lives in one trace ({trace_id}): span left out",
                  span.span_id)


def same_span(a: SpanView, b: SpanView) -> bool:
    """Whether two sightings of one span id say the same (a client retry) or not."""
    return (a.name == b.name and a.start_time_unix_nano == b.start_time_unix_nano
            and a.end_time_unix_nano == b.end_time_unix_nano and a.attributes == b.attributes
            and [(e.name, e.time_unix_nano, e.attributes) for e in a.events]
            == [(e.name, e.time_unix_nano, e.attributes) for e in b.events])


def duplicate_span(span: SpanView) -> Repair:
    """A span id sent again with other content: the first sighting is kept."""
    return Repair(DUPLICATE_SPAN, "span_id", span.span_id,
                  "the span id was sent again with other content: the first kept",
                  span.span_id)


def duplicate_id(field: str, value: str, span_id: str) -> Repair:
    """A second record of the envelope under an id already recorded (two spans, or a span
    and an event, each recording it): the first is kept."""
    return Repair(DUPLICATE_ID, field, _shown(value),
                  "a record with this id was already recorded in the envelope: the first kept",
                  span_id)


def duplicate_keys(keys: Sequence[str], span_id: str, event: str) -> list[Repair]:
    """Keys an attribute list repeats (OTLP keys are unique): the last occurrence is the
    value, checked as any other (so a last value the boundary drops leaves none)."""
    seen: set[str] = set()
    out = []
    for key in keys:
        if key in seen:
            out.append(Repair(DUPLICATE_KEY, key, "", "the key repeated in one attribute "
                              "list: the last occurrence kept", span_id, event))
        seen.add(key)
    return out


def collect(spans: Sequence[SpanView]) -> list[Repair]:
    return [repair for span in spans for repair in span.repairs]
