"""The host is never broken: misuse of the API is logged, records nothing, returns a recorder.

Every public method of ``AgentContext``, ``Envelope`` and each stage recorder is called with
wrong arguments, generated from its signature (so a new method or parameter is covered
without editing this file), plus explicit cases of the usual mistakes. Without strict mode
the application sees no exception, its own exception passes through its ``with`` block
unchanged, a warning is logged and the rebuilt envelope is still complete (nothing bogus
was recorded); under strict mode the same calls raise.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any, NamedTuple

import pytest
from opentelemetry import trace

from otel_agent_context import (
    AgentContext,
    Assembly,
    Budget,
    Compaction,
    ContextItem,
    Envelope,
    Selection,
    Surface,
)
from otel_agent_context._api import set_strict
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


# ---------------------------------------------------------------------------------------
# misuse: generated from the signatures, and the usual mistakes


class Case(NamedTuple):
    owner: type
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    label: str

    def __str__(self) -> str:
        return f"{self.owner.__name__}.{self.method} [{self.label}]"


#: Valid values for the parameters a method requires, by name: a new method whose required
#: parameter is not here fails test_every_public_method_is_covered until one is added.
VALID: dict[str, Callable[[CapturedTelemetry], Any]] = {
    "item": lambda tel: ContextItem(item_id="doc-1", token_estimate=5),
    "item_id": lambda tel: "doc-1",
    "missing_id": lambda tel: "mis-1",
    "lifecycle": lambda tel: "assembled",
    "span": lambda tel: tel.tracer.start_span("chat gpt-4o"),
    "exc": lambda tel: RuntimeError("failed"),
    "reason": lambda tel: "budget",
    "segment": lambda tel: "history",
    "rows": lambda tel: [("msg-1", "user_message", 3, "message_history", None)],
    "note": lambda tel: "the refund limit",
}


def _members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _wrong_values(hint: Any) -> Iterator[tuple[str, Any]]:
    """Values the annotation ``hint`` does not allow, each with a label."""
    members = _members(hint)
    yield "a value of no accepted type", JUNK
    if type(None) not in members:
        yield "None where a value is required", None
    origins = {typing.get_origin(m) for m in members}
    if int in members:
        yield "a negative count", -1
        yield "a bool for an int", True
        yield "a digit string for an int", "3"
    if float in members:
        yield "nan", math.nan
    if any(isinstance(m, type) and issubclass(m, Enum) for m in members):
        yield "an unknown enum string", "nonsense"
    if trace.Span in members:
        yield "a non-Span for a span", "chat gpt-4o"
    if bool in members:
        yield "an int for a bool", 1
    if typing.get_origin(hint) is Sequence or Sequence in origins:
        yield "a bare string for a sequence", "abc"
        yield "a sequence with a wrong element", ["ok", JUNK]
    if Mapping in origins:
        yield "a mapping with a wrong value", {"bm25": "high"}
    if ContextItem in members:
        yield "an empty mapping for an item", {}


def generated_cases(tel: CapturedTelemetry) -> list[Case]:
    cases: list[Case] = []
    for owner in (AgentContext, *RECORDERS):
        for name in public_methods(owner):
            method = getattr(owner, name)
            hints = typing.get_type_hints(method)
            params = [p for p in inspect.signature(method).parameters.values()
                      if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            required = {p.name: VALID[p.name](tel) for p in params if p.default is p.empty
                        and p.name in VALID}
            cases.append(Case(owner, name, (), {**required, "no_such_argument": 1},
                              "an unknown keyword"))
            for p in params:
                hint = hints.get(p.name, Any)
                if hint is Any:
                    continue
                for label, value in _wrong_values(hint):
                    cases.append(Case(owner, name, (), {**required, p.name: value},
                                      f"{p.name}: {label}"))
    return cases


EXPLICIT: list[Case] = [
    Case(Envelope, "budget", (), {"target": "nonsense"}, "unknown target"),
    Case(Envelope, "budget", (), {"max_tokens": -1}, "negative max_tokens"),
    Case(Envelope, "selection", (), {"start_time": "yesterday"}, "a start time not RFC 3339"),
    Case(Envelope, "injection", (), {"span": "chat gpt-4o"}, "a string for span"),
    Case(Envelope, "missing", (), {"severity": "dire"}, "unknown severity"),
    Case(Envelope, "redaction", (None,), {}, "None item id"),
    Case(Envelope, "set_lifecycle", ("nonsense",), {}, "unknown lifecycle"),
    Case(Envelope, "mark_compacted", (None,), {}, "None for a span"),
    Case(Envelope, "fail", (None,), {}, "None for an exception"),
    Case(AgentContext, "envelope", (), {"span": object()}, "a non-Span for span"),
    Case(AgentContext, "envelope", (), {"scope": "nonsense"}, "unknown scope"),
    Case(AgentContext, "envelope", (), {"actor_refs": "alice"}, "a string for a list"),
    Case(Surface, "add", (None,), {}, "None item"),
    Case(Surface, "update", ("doc-1",), {}, "an id where an item is required"),
    Case(Selection, "omitted", ("doc-1",), {"reason": "too_long"}, "unknown reason"),
    Case(Selection, "omitted", ("doc-1",), {"reason": None}, "None reason"),
    Case(Selection, "selected", ("doc-1",), {"rank": "first"}, "a string rank"),
    Case(Selection, "selected", ("doc-1",), {"signals": {"bm25": "high"}}, "a string signal"),
    Case(Selection, "selected", ("doc-1",), {"timestamp": "yesterday"},
         "a timestamp not RFC 3339"),
    Case(Budget, "actual", (), {"tokens": -5}, "negative tokens"),
    Case(Budget, "truncated", (), {"item_id": "d", "tokens_before": -1, "tokens_after": 3},
         "negative tokens before"),
    Case(Budget, "segment", (None,), {}, "None segment"),
    Case(Budget, "overflowed", (), {"strategy": "nonsense"}, "unknown strategy"),
    Case(Assembly, "block", ("doc-1",), {"tokens": -1}, "negative tokens"),
    Case(Assembly, "block", ("doc-1",), {"injection_point": "nowhere"}, "unknown point"),
    Case(Assembly, "blocks", ([("m-1", "nonsense", 3, None, None)],), {}, "a row's kind"),
    Case(Assembly, "blocks", ([("m-1", None, -3, None, None)],), {}, "a row's tokens"),
    Case(Assembly, "blocks", ([(None, None, 3, None, None)],), {}, "a row's item id"),
    Case(Assembly, "blocks", ([("m-1", None, 3, None, 7)],), {}, "a row's digest"),
    Case(Assembly, "blocks", (["not a row"],), {}, "a row that is a string"),
    Case(Assembly, "inject", (), {"injection_point": "nowhere"}, "unknown point"),
    Case(Compaction, "set", (), {"coverage": 1.5}, "coverage above 1"),
    Case(Compaction, "set", (), {"coverage": -0.5}, "negative coverage"),
    Case(Compaction, "source", ("doc-1",), {"covered": "yes"}, "a string for covered"),
    Case(Compaction, "summary", (), {"token_estimate": -2}, "negative tokens"),
    Case(Compaction, "loss_note", (None,), {}, "None note"),
]


@contextlib.contextmanager
def _receiver(tel: CapturedTelemetry, owner: type) -> Iterator[Any]:
    """The object the application holds when it makes the call, inside its own blocks."""
    if owner is AgentContext:
        yield tel.agent_context
        return
    with tel.agent_context.envelope(agent_name="app") as env:
        if owner is Envelope:
            yield env
        else:
            with getattr(env, STARTERS[owner])() as stage:
                assert type(stage) is owner
                yield stage


def _call(tel: CapturedTelemetry, case: Case, boom: BaseException) -> None:
    """The application's code: the misused call, the recorder it got back used as one, then
    its own exception."""
    with _receiver(tel, case.owner) as receiver:
        result = getattr(receiver, case.method)(*case.args, **case.kwargs)
        if hasattr(result, "__enter__"):
            with result as rec:
                rec.stop()
        raise boom


def _assert_every_public_method_is_covered(cases: list[Case]) -> None:
    covered = {(c.owner, c.method) for c in cases}
    for owner in (AgentContext, *RECORDERS):
        for name in public_methods(owner):
            assert (owner, name) in covered, f"{owner.__name__}.{name}"
            for p in inspect.signature(getattr(owner, name)).parameters.values():
                if p.name != "self" and p.default is p.empty and p.kind not in (
                        p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    assert p.name in VALID, f"add a valid {p.name!r} for {owner}.{name}"


def test_misuse_is_logged_and_never_reaches_the_application(caplog) -> None:
    tel = CapturedTelemetry(strict=False)
    failures: list[str] = []
    try:
        cases = [*generated_cases(tel), *EXPLICIT]
        _assert_every_public_method_is_covered(cases)
        for case in cases:
            tel.clear()
            caplog.clear()
            boom = KeyError("the agent's own error")
            with caplog.at_level(logging.WARNING):
                try:
                    _call(tel, case, boom)
                except KeyError as caught:
                    if caught is not boom:
                        failures.append(f"{case}: another KeyError reached the application")
                except Exception as exc:  # noqa: BLE001 - what the application would see
                    failures.append(f"{case}: the application saw {exc!r}")
                else:
                    failures.append(f"{case}: the application's exception was swallowed")
            ours = [r for r in caplog.records if r.name == "otel_agent_context"
                    and r.levelno == logging.WARNING and f".{case.method}" in r.getMessage()]
            if not ours:
                failures.append(f"{case}: no warning logged")
            sdk = [r.getMessage() for r in caplog.records
                   if r.name.startswith("opentelemetry") and r.levelno >= logging.WARNING]
            if sdk:
                failures.append(f"{case}: bogus values reached the SDK: {sdk}")
            bundles = tel.bundles()
            if len(bundles) != (0 if case.owner is AgentContext else 1):
                failures.append(f"{case}: {len(bundles)} envelopes rebuilt")
            for bundle in bundles:
                if bundle["rebuild"]["status"] != "complete":
                    failures.append(f"{case}: the envelope is {bundle['rebuild']}")
        assert not failures, "\n".join(failures)
    finally:
        tel.shutdown()


def test_misuse_raises_under_strict_mode() -> None:
    tel = CapturedTelemetry(strict=True)
    failures: list[str] = []
    try:
        for case in [*generated_cases(tel), *EXPLICIT]:
            boom = KeyError("the agent's own error")
            try:
                _call(tel, case, boom)
            except (TypeError, ValueError):
                pass
            except KeyError as caught:
                if caught is boom:
                    failures.append(f"{case}: did not raise")
                else:
                    failures.append(f"{case}: raised {caught!r}")
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{case}: raised {exc!r}, not TypeError or ValueError")
        assert not failures, "\n".join(failures)
    finally:
        tel.shutdown()
        set_strict(False)


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


def test_a_failed_call_changes_no_state(caplog) -> None:
    """A rejected call counts nothing: the stage's totals are those of the good calls."""
    tel = CapturedTelemetry(strict=False)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_context"), \
                tel.agent_context.envelope() as env:
            with env.selection() as sel:
                sel.selected("doc-1", timestamp="yesterday")
                sel.selected("doc-2")
            with env.assembly() as asm:
                asm.block("doc-1", tokens=3, injection_point="nowhere")
                asm.block("doc-2", tokens=4)
            with env.budget(max_tokens=100) as bud:
                bud.overflowed(strategy="nonsense")
                bud.actual(tokens=10)
            with env.surface() as srf:
                srf.add("doc-1", timestamp="yesterday")
                srf.add("doc-2", token_estimate=7)
        (bundle,) = tel.bundles()
        assert bundle["rebuild"]["status"] == "complete"
        assert bundle["context_selections"][0]["selected_item_refs"] == ["doc-2"]
        (asm_rec,) = bundle["context_assemblies"]
        assert [b["index"] for b in asm_rec["ordered_blocks"]] == [0]
        assert asm_rec["token_count"] == 4
        assert bundle["context_budgets"][0]["overflow"] is False
        assert bundle["context_surfaces"][0]["item_count"] == 1
        assert bundle["context_surfaces"][0]["token_estimate"] == 7
    finally:
        tel.shutdown()
