"""Records to span/event attributes: the emitter half of the one mapping.

Which field goes to which attribute is the table's (``_table``, generated from the
registry); the rebuild (``rebuild/_rebuild.py``) reads the same table back.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

from . import _semconv as S
from ._digest import digest_bytes, digest_str
from ._masking import has_masker, mask
from ._records import ContextItem, ContextSourceRef, rfc3339_to_ns
from ._table import ATTRIBUTES, EVENTS, SPANS

__all__ = ["digest_text", "fields_to_attributes", "item_attributes", "source_attributes"]


def digest_text(text: str | bytes) -> str:
    """The digest of text (UTF-8) or bytes, recorded with or without content: keyed
    (``hmac-sha256:<hex>``) unless plain ones were asked for (see ``_digest``)."""
    return digest_str(text) if isinstance(text, str) else digest_bytes(text)


def _value(v: Any) -> Any:
    # StrEnum members are str subclasses; exporters want the plain value.
    return v.value if hasattr(v, "value") else v


_PLAIN, _ENUM, _ENUMS, _LIST = range(4)


def _plan(record: type, name: str) -> tuple[tuple[str, str, int], ...]:
    """(field, attribute, how to write it) for each field an item event carries of
    ``record``, from the table; content fields and the item id are the caller's."""
    hints = typing.get_type_hints(record)
    rows = []
    for f in _ITEM_EVENT[name]:
        spec = ATTRIBUTES[f.attribute]
        if f.field == "item_id" or spec.content:
            continue
        hint = hints[f.field]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(hint) is list:
            (inner,) = typing.get_args(hint)
            how = _ENUMS if issubclass(inner, enum.Enum) else _LIST
        else:
            how = _ENUM if isinstance(hint, type) and issubclass(hint, enum.Enum) else _PLAIN
        rows.append((f.field, f.attribute, how))
    return tuple(rows)


_ITEM_EVENT = EVENTS[S.EVENT_ITEM_ADDED].records
_ITEM_PLAN = _plan(ContextItem, "ContextItem")
_SOURCE_PLAN = _plan(ContextSourceRef, "ContextSourceRef")
_CONTENT = tuple((f.field, f.attribute, _PLAIN) for f in _ITEM_EVENT["ContextItem"]
                 if ATTRIBUTES[f.attribute].content)


def _writer(plan: tuple[tuple[str, str, int], ...], name: str) -> Any:
    """A function writing a record's set fields as attributes, compiled from ``plan`` (the
    table's) once at import: straight-line code, as fast as writing each field by hand."""
    lines = [f"def {name}(r, out):"]
    for field, attribute, how in plan:
        lines.append(f"    v = r.{field}")
        if how == _ENUM:
            lines.append(f"    if v is not None: out[{attribute!r}] = v._value_")
        elif how == _ENUMS:
            lines.append(f"    if v: out[{attribute!r}] = tuple([e._value_ for e in v])")
        elif how == _LIST:
            lines.append(f"    if v: out[{attribute!r}] = tuple(v)")
        else:
            lines.append(f"    if v is not None: out[{attribute!r}] = v")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - our own table, not input
    return namespace[name]


_CONTENT_ATTRIBUTES = tuple(attribute for _, attribute, _ in _CONTENT)
_write_item = _writer(_ITEM_PLAN, "write_item")
_write_content = _writer(_CONTENT, "write_content")
_write_source = _writer(_SOURCE_PLAN, "write_source")


#: (span or event name, record) -> {record field: (attribute, is content)}
_FIELDS: dict[tuple[str, str], dict[str, tuple[str, bool]]] = {
    (name, record): {f.field: (f.attribute, ATTRIBUTES[f.attribute].content) for f in fields}
    for table in (SPANS, EVENTS) for name, spec in table.items()
    for record, fields in spec.records.items()
}


def fields_to_attributes(where: str, record: str, capture_content: bool,
                         **fields: Any) -> dict[str, Any]:
    """Attributes of a span or event from the fields of the record it carries, through the
    table: the fields that are set, content fields only under content capture."""
    mapping = _FIELDS[(where, record)]
    out: dict[str, Any] = {}
    for field, value in fields.items():
        if value is None or value == ():
            continue
        attribute, content = mapping[field]
        if content:
            if not capture_content:
                continue
            value = mask(value)
            if value is None:
                continue
        out[attribute] = value
    return out


def source_attributes(src: ContextSourceRef, out: dict[str, Any]) -> None:
    _write_source(src, out)
    for key, native in src.external_mappings.items():
        out[S.NATIVE_REUSED.get(key) or S.SOURCE_NATIVE_PREFIX + key] = native


def item_attributes(item: ContextItem, capture_content: bool,
                    blocked_sensitivities: frozenset[str]) -> tuple[dict[str, Any], bool]:
    """Attributes of an item event, and whether content was withheld by the sensitivity
    policy (the caller then records a ``context.redaction.applied`` event).
    ``blocked_sensitivities`` holds lower-case names; matching ignores case."""
    out: dict[str, Any] = {S.ITEM_ID: item.item_id}
    _write_item(item, out)
    withheld = False
    if capture_content:
        if item.sensitivity is not None and item.sensitivity.lower() in blocked_sensitivities:
            withheld = item.content is not None or item.title is not None
        else:
            _write_content(item, out)
            if has_masker():
                for attribute in _CONTENT_ATTRIBUTES:
                    if attribute in out:
                        value = mask(out[attribute])
                        if value is None:
                            del out[attribute]
                        else:
                            out[attribute] = value
    if item.digest is None and item.content is not None:
        out[S.ITEM_DIGEST] = digest_text(item.content)
    if item.source_refs:
        # The contract carries one source ref per item event: the first, the item's origin.
        source_attributes(item.source_refs[0], out)
    return out, withheld


def to_ns(value: int | str | None) -> int | None:
    """A timestamp given as nanoseconds or RFC 3339 text, as nanoseconds."""
    if value is None or isinstance(value, int):
        return value
    return rfc3339_to_ns(value)
