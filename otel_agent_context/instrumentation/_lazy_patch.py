"""Wrappers applied when their module is imported, shared by the framework instrumentors
(OpenAI Agents SDK, MCP): instrumenting imports nothing, and ``remove_all`` undoes only
what was applied."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import wrapt

from .._failsafe import is_strict

__all__ = ["LazyPatches", "internal_failure"]

_log = logging.getLogger("otel_agent_context")
_MARK = "_self_otel_agent_context"

#: (owner resolved from the module, attribute, wrapt wrapper)
Target = tuple[Callable[[Any], Any], str, Callable[..., Any]]


def internal_failure(framework: str, what: str) -> None:
    """Our error inside a hook: raise under the test kit's strict mode, else log it."""
    if is_strict():
        raise
    _log.warning("otel_agent_context: %s %s failed; its context telemetry is lost",
                 framework, what, exc_info=True)


class LazyPatches:
    """``targets``: module name -> what to wrap in it, once that module is imported and
    while ``enabled()`` says so."""

    def __init__(self, targets: dict[str, list[Target]], enabled: Callable[[], bool]) -> None:
        self._targets = targets
        self._enabled = enabled
        self._hooked: set[str] = set()
        self._applied: list[tuple[Any, str]] = []

    def apply_all(self) -> None:
        for name in self._targets:
            module = sys.modules.get(name)
            if module is not None:
                self._apply(module)
            elif name not in self._hooked:
                self._hooked.add(name)
                wrapt.register_post_import_hook(self._on_import, name)

    def _on_import(self, module: Any) -> None:
        if self._enabled():
            self._apply(module)

    def _apply(self, module: Any) -> None:
        for owner_of, attr, wrapper in self._targets.get(module.__name__, ()):
            owner = owner_of(module)
            original = vars(owner).get(attr) if owner is not None else None
            if original is None:
                _log.warning("otel_agent_context: %s has no %s; not instrumented",
                             module.__name__, attr)
                continue
            if getattr(original, _MARK, False):
                continue
            proxy = wrapt.FunctionWrapper(original, wrapper)
            setattr(proxy, _MARK, True)
            setattr(owner, attr, proxy)
            self._applied.append((owner, attr))

    def remove_all(self) -> None:
        while self._applied:
            owner, attr = self._applied.pop()
            current = vars(owner).get(attr)
            if current is not None and getattr(current, _MARK, False):
                setattr(owner, attr, current.__wrapped__)
