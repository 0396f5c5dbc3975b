"""Wrappers applied when their module is imported, shared by the framework instrumentors
(OpenAI Agents SDK, MCP): instrumenting imports nothing, and ``remove_all`` undoes only
what was applied."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from .._failsafe import is_strict

__all__ = ["LazyInstrumentor", "LazyPatches", "Switch", "internal_failure"]

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


class Switch:
    """The AgentContext a framework's hooks record into; None while uninstrumented."""

    def __init__(self) -> None:
        self.ctx: Any = None

    def on(self) -> bool:
        return self.ctx is not None


class LazyInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """A framework instrumentor whose hooks are :class:`LazyPatches` reading a
    :class:`Switch`. ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and
    ``capture_content``, or a ready ``agent_context`` instead."""

    _instruments: tuple[str, ...] = ()
    _switch: Switch
    _patches: LazyPatches

    def instrumentation_dependencies(self) -> Collection[str]:
        return self._instruments

    def _instrument(self, **kwargs: Any) -> None:
        from .._api import AgentContext

        given = kwargs.get("agent_context")
        options: dict[str, Any] = {
            key: kwargs.get(key) for key in ("tracer_provider", "meter_provider",
                                             "capture_content")}
        self._switch.ctx = given if isinstance(given, AgentContext) else AgentContext(**options)
        self._patches.apply_all()

    def _uninstrument(self, **kwargs: Any) -> None:
        self._switch.ctx = None
        self._patches.remove_all()
