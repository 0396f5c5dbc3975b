"""A bundle as one JSON line, whatever text the application handed the API.

In process, a string can hold what JSON cannot carry (a lone surrogate, from a bad decode
upstream) and a number can exceed 64 bits where the boundary never looked (resource and
metadata values). ``orjson`` refuses both; rather than lose the envelope, such values are
made writable (text with U+FFFD for what is not Unicode, big numbers as text) and each
change is a ``text`` repair in the bundle, which is then partial.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .._table import ATTRIBUTES, RECORDS
from ._boundary import REPAIRED, TEXT, Repair, repair_json, shown_value

__all__ = ["encode_bundle", "encode_record"]

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
_LINE = orjson.OPT_APPEND_NEWLINE  # the line's end written by orjson: no copy to add it
_INT64 = (-(1 << 63), (1 << 63) - 1)
_SURROGATE = re.compile("[\ud800-\udfff]")
#: bundle fields that hold content: a repair of theirs never shows their text
_CONTENT_FIELDS = frozenset(f.field for fields in RECORDS.values() for f in fields
                            if ATTRIBUTES[f.attribute].content)


def encode_bundle(bundle: dict[str, Any]) -> bytes:
    """``bundle`` as one JSON line (``\\n`` included); values JSON cannot carry are repaired
    in place first, and listed in ``bundle["rebuild"]["repairs"]``."""
    try:  # the rebuild's keys are all text: orjson's own path, a third faster than with
        return orjson.dumps(bundle, option=_LINE)  # OPT_NON_STR_KEYS (the same bytes)
    except orjson.JSONEncodeError:
        pass
    try:
        return orjson.dumps(bundle, option=_OPTIONS)
    except orjson.JSONEncodeError:
        pass
    repairs: list[Repair] = []
    for key in list(bundle):
        bundle[key] = _clean(bundle[key], key, repairs)
    rebuild = bundle.setdefault("rebuild", {})
    if isinstance(rebuild, dict) and repairs:
        rebuild["status"] = "partial"
        reasons = rebuild.setdefault("partial_reasons", [])
        if REPAIRED not in reasons:
            reasons.append(REPAIRED)
        rebuild.setdefault("repairs", []).extend(repair_json(r) for r in repairs)
    return orjson.dumps(bundle, option=_OPTIONS)


def encode_record(record: dict[str, Any]) -> bytes:
    """Any other record (a dead letter) as one JSON line, made writable the same way; it
    never raises for a value: what cannot be written becomes text."""
    try:
        return orjson.dumps(record, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return orjson.dumps(_clean(record, "", []), option=_OPTIONS)


def _text(value: str, path: str, repairs: list[Repair]) -> str:
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        fixed = _SURROGATE.sub("\ufffd", value)
        field = path.rpartition(".")[2].partition("[")[0]
        repairs.append(Repair(TEXT, path, shown_value(fixed, field in _CONTENT_FIELDS),
                              "not valid Unicode (a lone surrogate): replaced with U+FFFD"))
        return fixed


def _clean(value: Any, path: str, repairs: list[Repair]) -> Any:
    if isinstance(value, str):
        return _text(value, path, repairs)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        if _INT64[0] <= value <= _INT64[1]:
            return value
        repairs.append(Repair(TEXT, path, f"<int of {value.bit_length()} bits>",
                              "an int beyond 64 bits: written as text"))
        try:
            return str(value)
        except ValueError:  # beyond Python's 4,300-digit limit for decimal text
            return hex(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = _text(k if isinstance(k, str) else str(k), path, repairs)
            if key in out:  # two keys became one once repaired: keep both values
                base, n = key, 2
                while key in out:
                    key, n = f"{base}#{n}", n + 1
                repairs.append(Repair(TEXT, path, key,
                                      "a key equal to another once repaired: renamed"))
            out[key] = _clean(v, f"{path}.{key}", repairs)
        return out
    if isinstance(value, (list, tuple)):
        return [_clean(v, f"{path}[{i}]", repairs) for i, v in enumerate(value)]
    repairs.append(Repair(TEXT, path, type(value).__name__, "not a JSON value: written as text"))
    return _text(str(value), path, repairs)
