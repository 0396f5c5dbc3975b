"""``schema`` and ``validate``: the JSON Schema of the records and bundles, and a checker for
JSON Lines files of bundles that names the line and field of every error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
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
        if not path.is_file():
            print(f"validate: {args.file}: no such file", file=sys.stderr)
            return 2
        stream = path.open("rb")
    errors = 0
    with stream:
        for number, field, message in validate_lines(iter(stream)):
            errors += 1
            if errors <= args.max_errors:
                print(f"{args.file}:{number}: {field}: {message}")
    if errors:
        more = f" (first {args.max_errors} shown)" if errors > args.max_errors else ""
        print(f"{errors} error(s){more}", file=sys.stderr)
        return 1
    print(f"{args.file}: all bundles valid", file=sys.stderr)
    return 0
