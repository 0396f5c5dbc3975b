"""``schema`` and ``validate``: the JSON Schema of the records and bundles, and a checker for
JSON Lines files of bundles that names the line and field of every error: schema errors, and
refs to items (selected, omitted, candidate, assembly block) that the bundle does not hold."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from ._records import bundle_json_schema, records_json_schema

__all__ = ["register", "validate_lines"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("schema", help="print the JSON Schema of bundles or records")
    p.add_argument("--records", action="store_true",
                   help="one definition per record instead of the bundle schema")
    p.set_defaults(func=_schema)
    v = subparsers.add_parser("validate", help="check a JSON Lines file of bundles")
    v.add_argument("file", help="JSON Lines file of bundles ('-' for standard input)")
    v.add_argument("--max-errors", type=int, default=100,
                   help="stop listing after this many errors (default 100)")
    v.set_defaults(func=_validate)


def _schema(args: argparse.Namespace) -> int:
    schema = records_json_schema() if args.records else bundle_json_schema()
    sys.stdout.write(orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _path(error: jsonschema.ValidationError) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_lines(lines: Iterator[bytes]) -> Iterator[tuple[int, str, str]]:
    """(line number, field path, message) for every error in a stream of bundle lines."""
    validator = jsonschema.Draft202012Validator(bundle_json_schema())
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield number, "$", f"not JSON: {exc}"
            continue
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            yield number, _path(error), _message(error)
        if isinstance(doc, dict):
            for path, item_id in _dangling_refs(doc):
                yield number, path, f"item {item_id!r} is not in context_items"


def _records(doc: Mapping[str, Any], key: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(index, record) of every object in the bundle's list ``key``."""
    value = doc.get(key)
    if isinstance(value, list):
        for index, record in enumerate(value):
            if isinstance(record, dict):
                yield index, record


def _item_refs(record: Mapping[str, Any], key: str, field: str | None = None
               ) -> Iterator[tuple[int, Any]]:
    """(index, ref) of a list of refs: its strings, or the ``field`` of its objects."""
    value = record.get(key)
    if not isinstance(value, list):
        return
    for index, entry in enumerate(value):
        if field is None:
            yield index, entry
        elif isinstance(entry, dict) and field in entry:
            yield index, entry[field]


#: bundle list -> (list of item refs in each of its records, the field of a ref object, or
#: None for a list of item ids)
_ITEM_REFS: Mapping[str, tuple[tuple[str, str | None], ...]] = {
    "context_selections": (("candidate_item_refs", None), ("selected_item_refs", None),
                           ("omitted_item_refs", "item_id"), ("not_injected_item_refs", None)),
    "context_assemblies": (("ordered_blocks", "item_id"),),
}


def _dangling_refs(doc: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, item id) of every selection, block or block source ref to an item that
    is not the ``item_id`` of one of the bundle's ``context_items``. Refs that are not
    strings are left to the schema."""
    items = {item.get("item_id") for _, item in _records(doc, "context_items")}
    for key, lists in _ITEM_REFS.items():
        for index, record in _records(doc, key):
            for list_key, field in lists:
                for position, ref in _item_refs(record, list_key, field):
                    if isinstance(ref, str) and ref not in items:
                        path = f"$.{key}[{index}].{list_key}[{position}]"
                        yield (path if field is None else f"{path}.{field}"), ref
    for index, record in _records(doc, "context_assemblies"):  # the items a block carries
        for number, block in _item_refs(record, "ordered_blocks"):
            if isinstance(block, dict):
                for position, ref in _item_refs(block, "source_item_refs"):
                    if isinstance(ref, str) and ref not in items:
                        yield (f"$.context_assemblies[{index}].ordered_blocks[{number}]"
                               f".source_item_refs[{position}]"), ref


def _message(error: jsonschema.ValidationError) -> str:
    # "x is not valid under any of the given schemas" hides the useful part of an
    # optional field's anyOf [T, null]: say what T wanted instead.
    if error.validator == "anyOf" and error.context:
        wanted = [e.message for e in error.context if "'null'" not in e.message]
        if wanted:
            return "; ".join(wanted)
    return error.message


def _validate(args: argparse.Namespace) -> int:
    if args.file == "-":
        stream = sys.stdin.buffer
    else:
        path = Path(args.file)
        if path.is_dir():
            print(f"validate: {args.file}: a directory; give one of its bundles-*.jsonl files",
                  file=sys.stderr)
            return 2
        if not path.is_file():
            print(f"validate: {args.file}: no such file", file=sys.stderr)
            return 2
        stream = path.open("rb")
    errors = 0
    bundles = _Counted(stream)
    with stream:
        for number, field, message in validate_lines(iter(bundles)):
            errors += 1
            if errors <= args.max_errors:
                print(f"{args.file}:{number}: {field}: {message}")
    if not bundles.nonblank:
        print(f"validate: {args.file}: no bundles (empty file)", file=sys.stderr)
        return 1
    if errors:
        more = f" (first {args.max_errors} shown)" if errors > args.max_errors else ""
        print(f"{errors} error(s){more}", file=sys.stderr)
        return 1
    print(f"{args.file}: all bundles valid", file=sys.stderr)
    return 0


class _Counted:
    """The lines of a stream, noting whether any of them is not blank."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = lines
        self.nonblank = False

    def __iter__(self) -> Iterator[bytes]:
        for line in self._lines:
            if not self.nonblank and line.strip():
                self.nonblank = True
            yield line
