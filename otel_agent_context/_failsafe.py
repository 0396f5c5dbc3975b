"""Telemetry never breaks the host: the library's own errors are logged, not raised.

``_guard`` wraps every public method of the API. It checks the arguments against the
method's annotations (:mod:`._checks`), runs the method, and when either fails it logs a
warning and returns what the caller can go on using: the shared no-op recorder for a
method that returns a recorder (``returns=RECORDER``), an empty id for one that returns an
id (``returns=""``), else ``None``. A call that does not even fit the signature (a typo in
a keyword, a missing argument) is caught the same way. The application's ``with`` block
then runs on unchanged, its own exceptions untouched.

Strict mode (``OTEL_AGENT_CONTEXT_STRICT=true``, or :func:`set_strict` as
``otel_agent_context.testing`` does) raises instead, so the test suite sees every error.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import os
import types
from collections.abc import Callable
from typing import Any, TypeVar, overload

from . import _env
from ._checks import expression, rejects

__all__ = ["RECORDER", "is_strict", "set_strict"]

_log = logging.getLogger("otel_agent_context")
_F = TypeVar("_F", bound=Callable[..., Any])
_strict = os.environ.get(_env.OTEL_AGENT_CONTEXT_STRICT, "").lower() in ("1", "true", "yes")


def set_strict(value: bool) -> None:
    """Raise internal errors instead of logging them (used by ``otel_agent_context.testing``)."""
    global _strict
    _strict = value


def is_strict() -> bool:
    """Whether internal errors are raised (strict mode) rather than logged."""
    return _strict


class _Fallback(enum.Enum):
    RECORDER = "the shared no-op recorder"


#: ``_guard(returns=RECORDER)``: a failed call returns the shared no-op recorder. Looked up
#: when a call fails, not when the method is decorated: the no-op subclasses the recorders,
#: so it is made after them.
RECORDER = _Fallback.RECORDER


class _Required:
    def __repr__(self) -> str:
        return "<required>"


#: The default the guard gives a required parameter, so that a call missing it reaches the
#: guard (and is logged) instead of failing in the caller's frame.
_REQUIRED = _Required()


@overload
def _guard(fn: _F, /) -> _F: ...


@overload
def _guard(*, returns: Any = None) -> Callable[[_F], _F]: ...


def _guard(fn: Callable[..., Any] | None = None, /, *, returns: Any = None) -> Any:
    """Check the arguments, then log the library's own errors instead of raising them into
    the agent; a failed call returns ``returns`` (``RECORDER``: the shared no-op)."""
    if fn is None:
        return functools.partial(_guard, returns=returns)
    return functools.update_wrapper(_compile(fn, returns), fn)


def _compile(fn: Callable[..., Any], returns: Any) -> Callable[..., Any]:
    """The guarded ``fn``, as straight-line code written from its signature once: a wrapper
    with the same parameters (required ones defaulting to a marker, and catch-alls for
    extra arguments), an inline check per annotated parameter, then the call."""
    name = fn.__qualname__

    def failed() -> Any:
        # called inside the wrapper's ``except``: a bare ``raise`` re-raises its exception
        if _strict:
            raise
        _log.warning("otel_agent_context: %s failed; telemetry for this call is lost",
                     name, exc_info=True)
        if returns is RECORDER:
            from ._noop import NOOP

            return NOOP
        return returns

    def unexpected(more: tuple[Any, ...], extra: dict[str, Any]) -> None:
        raise TypeError(f"{name}() got unexpected arguments: {more!r} {extra!r}")

    def missing(param: str) -> None:
        raise TypeError(f"{name}() missing required argument {param!r}")

    ns: dict[str, Any] = {"_fn": _positional(fn), "_failed": failed,
                          "_unexpected": unexpected, "_missing": missing,
                          "_REQUIRED": _REQUIRED}
    params: list[str] = []  # the wrapper's
    call: list[str] = []  # the arguments it passes on, all by position
    star: list[str] = []  # then its *args and **kwargs, if ``fn`` has them
    checks: list[str] = []
    catch_all: list[str] = []  # its *_more and **_extra, which a correct call leaves empty
    kw_only = False
    for p in inspect.signature(fn).parameters.values():
        if p.name.startswith("_"):
            raise TypeError(f"{name}: a guarded parameter must not start with '_': {p.name}")
        ann = p.annotation
        if isinstance(ann, str):
            ann = eval(ann, fn.__globals__)  # noqa: S307 - the package's own annotations
        if p.kind is p.VAR_POSITIONAL:
            params.append(f"*{p.name}")
            star.insert(0, f"*{p.name}")
            kw_only = True
            continue
        if p.kind is p.VAR_KEYWORD:
            params.append(f"**{p.name}")
            star.append(f"**{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and not kw_only:
            params.append("*_more")
            catch_all.append("_more")
            kw_only = True
        is_self = p.name == "self" and not params
        if is_self:
            default = ""
        elif p.default is p.empty:
            default = "_REQUIRED"
            checks.append(f"if {p.name} is _REQUIRED: _missing({p.name!r})")
        else:
            default = f"_d_{p.name}"
            ns[default] = p.default
        params.append(f"{p.name}={default}" if default else p.name)
        call.append(p.name)
        test = expression(ann, p.name, ns, f"{name}({p.name}=)")
        if test != "True":
            ns[f"_r_{p.name}"] = rejects(ann, f"{name}({p.name}=)")
            # a default is valid: skip its check (a test that starts with ``is None`` needs
            # no skip for a None default: that is the cheaper test)
            none_first = p.default is None and test.startswith(f"({p.name} is None or")
            skip = (f"{p.name} is not {default} and "
                    if default != "_REQUIRED" and not none_first else "")
            checks.append(f"if {skip}not {test}: _r_{p.name}({p.name})")
    if not kw_only:
        params.append("*_more")
        catch_all.append("_more")
    if not any(p.startswith("**") for p in params):
        params.append("**_extra")
        catch_all.append("_extra")
    if catch_all:
        more = "_more" if "_more" in catch_all else "()"
        extra = "_extra" if "_extra" in catch_all else "{}"
        checks.insert(0, f"if {' or '.join(catch_all)}: _unexpected({more}, {extra})")
    source = "\n".join([
        f"def {fn.__name__}({', '.join(params)}):",
        "    try:",
        *(f"        {line}" for line in checks),
        f"        return _fn({', '.join(call + star)})",
        "    except Exception:",
        "        return _failed()",
    ])
    exec(source, ns)  # noqa: S102 - generated from the package's own signatures
    wrapper: Callable[..., Any] = ns[fn.__name__]
    return wrapper


def _positional(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its keyword-only parameters taking positions after the others: the same
    code object, told so. The wrapper passes every argument by position, which costs a
    fraction of passing a dozen by keyword, so a guarded call is no slower than the bare
    method was with a plain try/except wrapper (see benchmarks/api_bench.py)."""
    code = fn.__code__
    twin = types.FunctionType(
        code.replace(co_argcount=code.co_argcount + code.co_kwonlyargcount,
                     co_kwonlyargcount=0),
        fn.__globals__, fn.__name__, None, fn.__closure__)
    twin.__qualname__ = fn.__qualname__
    return twin
