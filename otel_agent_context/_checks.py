"""Argument checks written from the API's own annotations, as inline Python expressions.

Misuse of the API (``rank="1"``, ``tokens=-3``, ``item=None``, ``span="chat"``) must not
reach the telemetry as bogus values. ``_guard`` compiles each public method's parameter
annotations into straight-line checks (:func:`expression`) that run before the method, so a
rejected call is logged (or raised, in strict mode) and records nothing. The annotation is
the rule, so a new method or parameter is checked without anything written here:

- ``str``, ``bool``, ``None``, a class (``ContextItem``, ``Span``, an exception): an
  instance of it;
- ``MyEnum | str``: a member of the enum or the value of one (``"budget"``), nothing else;
- ``int``: an int that is not a bool, never negative: every int of the API is a count, a
  size, a position or a time in nanoseconds;
- ``float``: an int or a float, not a bool, finite;
- ``Sequence[X]``: a sequence that is not a string, every element an ``X``;
- ``Mapping[K, V]``: a mapping, every key a ``K`` and every value a ``V``;
- ``tuple[A, B, ...]``: a tuple (or list) of that many values, an ``A``, a ``B``...;
- ``Iterable[...]``: an iterable that is not a string (the method checks what it reads);
- ``Any`` or no annotation: anything; ``A | B``: either.

Inline expressions, not a call per argument: checking costs about what the method's own
``isinstance`` tests would (see benchmarks/api_bench.py).
"""

from __future__ import annotations

import collections.abc as abc
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["Check", "compile_check", "describe", "expression", "rejects"]

#: Check one value: returns nothing, raises ``TypeError`` or ``ValueError``.
Check = Callable[[Any], None]


def _const(ns: dict[str, Any], value: Any) -> str:
    """The name under which ``value`` is reachable from generated code in ``ns``."""
    name = f"_k{len(ns)}"
    ns[name] = value
    return name


def _plain(tp: Any) -> bool:
    """Checked by ``isinstance`` alone."""
    return isinstance(tp, type) and tp not in (int, float) and typing.get_origin(tp) is None


#: The types the expressions name, under names no parameter has (``Budget.actual`` has one
#: called ``bytes``).
_TYPES = {"_bool": bool, "_int": int, "_num": (int, float), "_str": str, "_text": (str, bytes),
          "_row": (tuple, list)}


def expression(tp: Any, v: str, ns: dict[str, Any], where: str = "") -> str:
    """A Python expression, true when the value named ``v`` is allowed by annotation ``tp``;
    the constants it needs are put in ``ns`` (the generated function's globals)."""
    ns.update(_TYPES)
    if tp is Any or tp is inspect.Parameter.empty:
        return "True"
    if tp is None or tp is type(None):
        return f"{v} is None"
    if tp is int:
        return f"({v}.__class__ is not _bool and isinstance({v}, _int) and {v} >= 0)"
    if tp is float:  # x - x == 0 is false for inf and nan
        return f"({v}.__class__ is not _bool and isinstance({v}, _num) and {v} - {v} == 0)"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [f"{v} is None"] if type(None) in args else []
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums and str in args:  # MyEnum | str: the members, as members or as values
            values = frozenset(m.value for e in enums for m in e)
            parts.append(f"(isinstance({v}, _str) and {v} in {_const(ns, values)})")
            args = tuple(a for a in args if a is not str and a not in enums)
        plain = tuple(a for a in args if _plain(a) and a is not type(None))
        if plain:
            parts.append(f"isinstance({v}, {_const(ns, plain)})")
        parts += [expression(a, v, ns, where) for a in args
                  if not _plain(a) and a is not type(None)]
        return "(" + " or ".join(parts) + ")"
    e = re.sub(r"\W", "_", v) + "_"  # the element of a container: a name of its own
    if origin is abc.Sequence:
        (element,) = args
        return (f"(isinstance({v}, {_const(ns, abc.Sequence)}) and not isinstance({v}, _text) "
                f"and all({expression(element, e, ns, where)} for {e} in {v}))")
    if origin is abc.Mapping:
        key, value = (expression(a, f"{e}{i}", ns, where) for i, a in enumerate(args))
        return (f"(isinstance({v}, {_const(ns, abc.Mapping)}) and all({key} and {value} "
                f"for {e}0, {e}1 in {v}.items()))")
    if origin is tuple and args and args[-1] is not Ellipsis:
        fields = " and ".join(expression(a, f"{v}[{i}]", ns, where) for i, a in enumerate(args))
        return f"(isinstance({v}, _row) and len({v}) == {len(args)} and {fields})"
    if origin is abc.Iterable:
        return f"(isinstance({v}, {_const(ns, abc.Iterable)}) and not isinstance({v}, _text))"
    if _plain(tp):
        return f"isinstance({v}, {_const(ns, tp)})"
    raise TypeError(f"{where}: no argument check for the annotation {tp!r}")


def describe(tp: Any) -> str:
    """What ``tp`` allows, in words (for the error message)."""
    if tp is None or tp is type(None):
        return "None"
    if tp is int:
        return "a non-negative int"
    if tp is float:
        return "a finite number"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums and str in args:
            values = ", ".join(repr(m.value) for e in enums for m in e)
            args = tuple(a for a in args if a is not str and a not in enums)
            return " or ".join([f"one of {values}", *(describe(a) for a in args)])
        return " or ".join(describe(a) for a in args)
    if origin is abc.Sequence:
        return f"a sequence (not a string) of {describe(args[0])}"
    if origin is abc.Mapping:
        return f"a mapping of {describe(args[0])} to {describe(args[1])}"
    if origin is tuple:
        return f"a tuple ({', '.join(describe(a) for a in args)})"
    if origin is abc.Iterable:
        return "an iterable (not a string)"
    return f"a {getattr(tp, '__name__', tp)}"


def rejects(tp: Any, where: str) -> Callable[[Any], None]:
    """Raise the error for a value ``tp`` does not allow: ``ValueError`` for a value of the
    right type out of range (-3, nan, an unknown enum value), ``TypeError`` otherwise."""
    text = describe(tp)
    if typing.get_origin(tp) is tuple:  # name the field that is wrong
        fields = [compile_check(a, f"{where}[{i}]") for i, a in enumerate(typing.get_args(tp))]

        def reject_row(value: Any) -> None:
            if not isinstance(value, (tuple, list)) or len(value) != len(fields):
                raise TypeError(f"{where}: expected {text}, got {value!r}")
            for check, field in zip(fields, value, strict=True):
                check(field)

        return reject_row
    members = typing.get_args(tp) if typing.get_origin(tp) in (
        typing.Union, types.UnionType) else (tp,)
    numeric = int in members or float in members
    enumerated = any(isinstance(m, type) and issubclass(m, enum.Enum) for m in members)

    def reject(value: Any) -> None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        bad_value = numeric and number or enumerated and isinstance(value, str)
        raise (ValueError if bad_value else TypeError)(
            f"{where}: expected {text}, got {value!r}")

    return reject


def compile_check(tp: Any, where: str) -> Check:
    """The check of one annotation ``tp`` (a type, not a string); ``where`` names the value
    in the error message."""
    ns: dict[str, Any] = {"_reject": rejects(tp, where)}
    source = f"def check(v):\n    if not {expression(tp, 'v', ns, where)}:\n        _reject(v)\n"
    exec(source, ns)  # noqa: S102 - the package's own annotations, not input
    check: Check = ns["check"]
    return check
