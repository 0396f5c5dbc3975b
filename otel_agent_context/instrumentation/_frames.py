"""Our wrapper frames stay out of the application's warnings.

A client library names the line that called it in its warnings with ``stacklevel``: the
Anthropic client's model-deprecation ``DeprecationWarning`` is issued with
``stacklevel=3`` (``create``, the SDK's argument-checking decorator, the caller). A wrapper
between the application and the client is one frame more, so uninstrumented the warning
names the application's line and instrumented it names the wrapper, where Python's default
filters hide a ``DeprecationWarning``; a warning whose level reached one frame past the
caller now names the caller instead.

``warnings.warn`` counts frames, so the count has to skip ours. There is no per-call,
thread-safe way to do that from the wrapper (``warnings.catch_warnings`` swaps process-wide
state, and ``skip_file_prefixes`` is the warning's issuer's argument, not ours, and only
from Python 3.12 on). So once an instrumentor has wrapped a client (not before:
``instrument()`` alone changes nothing), ``warnings.warn`` is a thin function that counts
the frames itself, exactly as the interpreter does (frames of ``importlib._bootstrap``
skipped from an outside caller, ``skip_file_prefixes`` honoured), except that our
registered wrapper frames do not count, and then calls the original ``warnings.warn`` with
the level that names the same frame (or, when no level counted from here can name it,
``warnings.warn_explicit`` at that frame). A warning whose levels cross
none of our frames names exactly the frame it named before; arguments the interpreter
refuses are passed to it as given (its own error, worded as its own). It keeps no state per call, so
it is safe from any thread, and it is removed when the last instrumentor is turned off
(unless something else replaced ``warnings.warn`` after us, which is then left alone).

One difference stays visible: a warning turned into an error (``-W error``) raises from
this function, so its traceback has one more frame, here, below the client's line.
"""

from __future__ import annotations

import operator
import sys
import threading
import warnings
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

__all__ = ["hide", "hidden_codes", "install", "nested", "uninstall"]

#: Code objects of our wrapper functions: their frames do not count as a warning's level.
_hidden: set[CodeType] = set()
_lock = threading.Lock()
_users = 0
_original: Callable[..., Any] | None = None
_hook: Callable[..., Any] | None = None
_MISSING = object()


def hide(*functions: Any) -> None:
    """Frames of these functions (or code objects) are skipped when a warning's level is
    counted."""
    for fn in functions:
        code = fn if isinstance(fn, CodeType) else getattr(fn, "__code__", None)
        if code is not None:
            _hidden.add(code)


def hidden_codes() -> frozenset[CodeType]:
    return frozenset(_hidden)


def nested(function: Any, name: str) -> CodeType:
    """The code of the function ``name`` defined inside ``function`` (a closure made per
    call has this one code object)."""
    for const in function.__code__.co_consts:
        if isinstance(const, CodeType) and const.co_name == name:
            return const
    raise LookupError(f"{function.__qualname__} defines no {name}")


def _internal(code: CodeType) -> bool:
    # the interpreter's test for its import machinery's frames (Python/_warnings.c)
    name = code.co_filename
    return "importlib" in name and "_bootstrap" in name


def _skipped(code: CodeType, prefixes: tuple[str, ...]) -> bool:
    """Whether the interpreter, counting from a caller outside the import machinery,
    passes over this frame without counting it."""
    # the interpreter's prefix test leaves out the name's last character: a prefix that is
    # the whole file name does not match it (``PyUnicode_Tailmatch(name, prefix, 0, -1)``)
    return _internal(code) or bool(prefixes and code.co_filename.startswith(prefixes, 0, -1))


def _target(caller: FrameType, stacklevel: int, prefixes: tuple[str, ...]
            ) -> tuple[FrameType | None, bool]:
    """The frame ``warnings.warn`` called from ``caller`` with ``stacklevel`` names when
    our frames are not counted, and whether any of ours was passed."""
    outside = not _internal(caller.f_code)  # from an internal caller every frame counts
    frame: FrameType | None = caller
    level = 1
    crossed = False
    while level < stacklevel:
        frame = frame.f_back  # type: ignore[union-attr]
        if frame is None:
            break
        code = frame.f_code
        if code in _hidden or code in _OWN:
            crossed = True
        elif not (outside and _skipped(code, prefixes)):
            level += 1
    return frame, crossed


def _level_from(start: FrameType, target: FrameType, prefixes: tuple[str, ...]) -> int | None:
    """The level that names ``target`` counted by the interpreter from ``start`` (a frame
    of ours, so the import machinery's frames and ``prefixes`` are passed over), or None if
    no level does."""
    if _skipped(target.f_code, prefixes):
        return None
    frame: FrameType | None = start
    level = 1
    while frame is not None and frame is not target:
        frame = frame.f_back
        if frame is not None and not _skipped(frame.f_code, prefixes):
            level += 1
    return level if frame is target else None


def _explicit(original: Callable[..., Any], message: Any, category: Any,
              frame: FrameType | None, source: Any, kwargs: dict[str, Any]) -> None:
    """``warn`` at ``frame``, built as the interpreter builds it (only when no level
    counted from our frame names that frame, e.g. the caller is the import machinery).
    None: past the top of the stack, which the interpreter names its own way ("sys", line 1
    up to Python 3.12, "<sys>", line 0 from 3.13): a level past any stack from here."""
    if frame is None:
        original(message, category, sys.maxsize, source, **kwargs)
        return
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        original(message, category, 2, source)  # the interpreter's own TypeError
        return
    globals_ = frame.f_globals
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    registry = globals_.setdefault("__warningregistry__", {})
    module = globals_.get("__name__", _MISSING)
    if not (module is None or isinstance(module, str)):
        module = "<string>"
    warnings.warn_explicit(message, category, filename, lineno, module, registry,
                           source=source)


def _keywords_taken(kwargs: dict[str, Any]) -> bool:
    """Whether the interpreter takes these keywords: ``skip_file_prefixes``, a tuple of
    strings, from Python 3.12 on (anything else is its own ``TypeError``)."""
    prefixes = kwargs.get("skip_file_prefixes")
    return (sys.version_info >= (3, 12) and len(kwargs) == 1
            and isinstance(prefixes, tuple) and all(isinstance(p, str) for p in prefixes))


#: the defaults of ``warnings.warn``'s parameters that complete ``n`` positional arguments
_PADDING = ((), (None, 1, None), (1, None), (None,), ())


#: the interpreter's words for an ``__index__`` that returns a subclass of int
_INDEX_DEPRECATED = ("__index__ returned non-int (type {}).  The ability to return an instance"
                     " of a strict subclass of int is deprecated, and may be removed in a"
                     " future version of Python.")


def _index(original: Callable[..., Any], stacklevel: Any) -> int:
    """``stacklevel`` as the interpreter reads a level (``operator.index``), read once; when
    its ``__index__`` returns a subclass of int, the interpreter's ``DeprecationWarning``
    about it is issued where the interpreter issues it, at the warning's issuer (from here
    it would name this line)."""
    method = getattr(type(stacklevel), "__index__", None)
    if isinstance(stacklevel, int) or not callable(method):
        return operator.index(stacklevel)  # an int, or the interpreter's own TypeError
    value = method(stacklevel)
    if type(value) is int:
        return value
    if not isinstance(value, int):
        raise TypeError(f"__index__ returned non-int (type {type(value).__name__})")
    try:
        issuer: FrameType | None = sys._getframe(2)
    except ValueError:  # the hook called from C: no Python frame below it
        issuer = None
    _explicit(original, _INDEX_DEPRECATED.format(type(value).__name__), DeprecationWarning,
              issuer, None, {})
    return int(value)


def _named(message: Any = _MISSING, category: Any = None, stacklevel: Any = 1,
           source: Any = None, **others: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """A call's arguments bound as the interpreter binds them (``TypeError``: it refuses
    them too, in its own words)."""
    return message, category, stacklevel, source, others


def _make_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    def warn(*args: Any, **kwargs: Any) -> None:
        if not kwargs and 0 < len(args) < 5:
            message, category, stacklevel, source = args + _PADDING[len(args)]
        else:
            try:
                message, category, stacklevel, source, others = _named(*args, **kwargs)
            except TypeError:
                others = None
            if others is None or message is _MISSING or others and not _keywords_taken(
                    others):
                # arguments the interpreter refuses: its own error, from them as given
                return original(*args, **kwargs)
            kwargs = others
        prefixes = kwargs["skip_file_prefixes"] if kwargs else ()
        if type(stacklevel) is int and 0 < stacklevel < sys.maxsize:
            level = stacklevel
        else:
            # a bool or an object with ``__index__`` is its integer (read once); no integer
            # at all raises the interpreter's own error
            level = _index(original, stacklevel)
            if prefixes and -sys.maxsize - 1 <= level < 2:
                level = 2  # the interpreter's rule, before it counts: see below
            if not -sys.maxsize - 1 < level < sys.maxsize:
                # past the interpreter's range (its error) or at its ends (past the top of
                # any stack, from here as from the caller)
                return original(message, category, level, source, **kwargs)
            level = max(level, 1)  # at most 0 names the issuer, as 1 does
        # the interpreter's rule: with prefixes, level 1 (the issuer itself) is never named
        if prefixes and level < 2:
            level = 2
        up = level + 1
        target: FrameType | None = None
        counted: int | None
        # the count is made here, the warning issued after it: a warning that raises (an
        # error filter) must not be issued twice
        try:
            # no local holds this frame: a frame holding itself is a reference cycle, which
            # kept the warning's source and every frame it crossed alive until the
            # collector's next pass
            caller = sys._getframe(1)
            name = caller.f_code.co_filename
            if level == 1 and not kwargs and ("importlib" not in name
                                              or "_bootstrap" not in name):
                # the issuer names itself (asyncio's ResourceWarnings, ~9 a model call in an
                # Agents SDK run), outside the import machinery (``_internal``, inline: the
                # common case): no frame to count, what the general count below finds
                counted = 2
            else:
                target, crossed = _target(caller, level, prefixes)
                if not crossed and not _internal(caller.f_code) and not (
                        prefixes and _skipped(caller.f_code, prefixes)):
                    counted = level + 1  # none of ours on the way: one more for this frame
                else:
                    counted = (_level_from(sys._getframe(), target, prefixes)
                               if target is not None else None)
        except Exception:  # the count must never break a warning (nor a caller with no
            # Python frame, called from C: a thread's or atexit's): the plain one then
            counted = up
        if counted is None:
            return _explicit(original, message, category, target, source, kwargs)
        if kwargs:
            return original(message, category, counted, source, **kwargs)
        return original(message, category, counted, source)

    warn.__doc__ = original.__doc__
    warn.__wrapped__ = original  # type: ignore[attr-defined]
    return warn


#: This module's frames between a warning's issuer and the interpreter: never counted either,
#: since a warning issued while one is handled (by a filter's ``match``, by
#: ``showwarning``) counts the frames below it too
_OWN = frozenset({nested(_make_hook, "warn"), _explicit.__code__, _index.__code__})


def install() -> None:
    """Count warnings' levels without our frames (reference-counted)."""
    global _users, _original, _hook
    with _lock:
        _users += 1
        if _users > 1 and _hook is not None:
            return
        _original = warnings.warn
        _hook = _make_hook(_original)
        warnings.warn = _hook


def uninstall() -> None:
    """Undo one :func:`install`; the last one restores ``warnings.warn`` if it is still
    ours."""
    global _users, _original, _hook
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users:
            return
        if warnings.warn is _hook and _original is not None:
            warnings.warn = _original
        _original = _hook = None
