"""The host is never broken: a failed call is logged, records nothing, returns a recorder."""

from __future__ import annotations

import inspect
import logging
import typing
from typing import Any

import pytest
from opentelemetry import trace

from otel_agent_context import (
    AgentContext,
    Assembly,
    Budget,
    Compaction,
    Envelope,
    Selection,
    Surface,
)
from otel_agent_context.testing import CapturedTelemetry

RECORDERS: tuple[type, ...] = (Envelope, Surface, Selection, Budget, Assembly, Compaction)
STARTERS = {Surface: "surface", Selection: "selection", Budget: "budget",
            Assembly: "assembly", Compaction: "compaction"}


class _Junk:
    """A value of a type no parameter of the API accepts."""

    def __repr__(self) -> str:
        return "<junk>"


JUNK = _Junk()


def public_methods(cls: type) -> list[str]:
    return sorted(name for name, member in inspect.getmembers(cls)
                  if not name.startswith("_") and callable(member))


def _noop() -> Any:
    from otel_agent_context._noop import NOOP

    return NOOP


# ---------------------------------------------------------------------------------------
# the no-op recorder


def test_noop_is_every_recorder_type_and_does_not_record() -> None:
    noop = _noop()
    for cls in RECORDERS:
        assert isinstance(noop, cls), cls.__name__
    assert noop.is_recording() is False
    assert noop.span is trace.INVALID_SPAN
    ctx = AgentContext(tracer_provider=trace.NoOpTracerProvider())
    env = ctx.envelope()
    assert env is noop
    for starter in STARTERS.values():
        assert getattr(env, starter)() is noop


def test_real_recorders_record() -> None:
    tel = CapturedTelemetry()
    try:
        with tel.agent_context.envelope() as env:
            assert env.is_recording() is True
            for cls, starter in STARTERS.items():
                with getattr(env, starter)() as stage:
                    assert type(stage) is cls
                    assert stage.is_recording() is True
                assert stage.is_recording() is False  # its span has ended
    finally:
        tel.shutdown()


def test_noop_overrides_every_public_method_and_accepts_anything() -> None:
    noop = _noop()
    noop_cls = type(noop)
    for cls in (*RECORDERS, AgentContext):
        for name in public_methods(cls):
            if cls is AgentContext:
                continue  # the entry point is real; what it returns is the no-op
            # its own do-nothing method, not the real one inherited
            assert name in vars(noop_cls), f"the no-op does not override {cls.__name__}.{name}"
            hints = typing.get_type_hints(getattr(cls, name))
            result = getattr(noop, name)(JUNK, None, -1, junk=JUNK, span="not a span")
            returns = hints.get("return", type(None))
            if isinstance(returns, type) and issubclass(returns, RECORDERS):
                assert result is noop, name
            elif returns is str or typing.get_args(returns) == (str, type(None)):
                assert result == "", name
            elif returns is bool:
                assert result is False, name
            else:
                assert result is None, name
    # the shared no-op never changes: writes are ignored, ids stay empty
    noop.candidate_count = 5
    noop._derive = False
    assert noop.candidate_count is None and "_derive" not in vars(noop)
    for attr in ("context_id", "surface_id", "selection_id", "budget_id", "assembly_id",
                 "compaction_id"):
        assert getattr(noop, attr) == ""
    with noop as entered:
        assert entered is noop
    boom = KeyError("the agent's own error")
    with pytest.raises(KeyError) as caught, noop:
        raise boom
    assert caught.value is boom


def test_budget_with_an_unknown_target_runs_and_records_nothing_bogus(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"), \
                tel.agent_context.envelope(agent_name="app") as env:
            with env.budget(target="nonsense") as b:
                b.actual(tokens=3)
            assert b is _noop()
            with env.budget(max_tokens=10) as good:
                good.actual(tokens=5)
        assert "Envelope.budget failed" in caplog.text
        names = [s.name for s in tel.spans()]
        assert names.count("context.budget") == 1  # only the good one
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete"  # span_count counts what was sent
        (budget,) = bundle["context_budgets"]
        assert budget["target"] == "model" and budget["actual_tokens"] == 5
        (point,) = [p for _, p in tel.metrics()["context.budget.utilization"]]
        assert point.count == 1 and point.sum == 0.5  # the bogus budget recorded nothing
    finally:
        tel.shutdown()
