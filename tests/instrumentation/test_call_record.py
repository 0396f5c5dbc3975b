"""A call outside any application envelope records through ``CallRecord`` (no ``Envelope``
and ``FoldedBudget`` objects): what it records must equal, to the attribute's position, what
those objects record. Each shape runs twice on fresh telemetry (deterministic ids), against
a fresh stub: as shipped, and with every call's record turned into the objects right after
its start (``Call._full``), so the rest of the call (its usage, overflow, stop, a dropped
stream's early closing attributes) goes through them; spans, events, statuses, metric
points and rebuilt bundles are compared. The call's opening write is pinned exactly."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from llm_helpers import untimed
from llm_setup import CAPTURE_ENV, Setup
from stub_server import StubServer

from otel_agent_context import _folded, _instruments
from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import _common, _inference, _stub
from otel_agent_context.testing import CapturedTelemetry

HISTORY = [{"role": "system", "content": "You are ACME's support agent."},
           {"role": "user", "content": "Where is my order?"},
           {"role": "assistant", "content": "It shipped yesterday."},
           {"role": "user", "content": "When does it arrive?"}]


def _chat(stub: StubServer) -> None:
    openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0
                  ).chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                            max_completion_tokens=50)


def _stream(stub: StubServer) -> None:
    for _ in openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0
                           ).chat.completions.create(model="gpt-4o-mini", messages=HISTORY,
                                                     stream=True,
                                                     stream_options={"include_usage": True}):
        pass


def _dropped(stub: StubServer) -> None:
    stream = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k", max_retries=0
                                 ).messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                                   messages=HISTORY[1:], stream=True)
    next(iter(stream))
    del stream
    gc.collect()


def _messages(stub: StubServer) -> None:
    anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k", max_retries=0
                        ).messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                          system=HISTORY[0]["content"], messages=HISTORY[1:])


def _too_long(stub: StubServer) -> None:
    with pytest.raises(openai.BadRequestError):
        openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0
                      ).chat.completions.create(model="gpt-4", messages=[
                          {"role": "user", "content": "word " * 40_000}])


def _rejected(stub: StubServer) -> None:
    with pytest.raises(openai.APIStatusError):
        openai.OpenAI(base_url=f"{stub.url}/nowhere", api_key="k", max_retries=0
                      ).chat.completions.create(model="gpt-4o-mini", messages=HISTORY)


def _truncated(stub: StubServer) -> None:
    openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0).responses.create(
        model="gpt-4", input=[{"role": "user", "content": "word " * 2500} for _ in range(4)],
        truncation="auto", max_output_tokens=500)


SHAPES = {"chat": _chat, "stream": _stream, "dropped_stream": _dropped,
          "messages": _messages, "too_long": _too_long, "rejected": _rejected,
          "truncated": _truncated}


def _record(official: str, events_as: str, shape: Callable[[StubServer], None],
            objects: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if objects:
        begin = _common.Call._begin

        def begin_then_objects(self: Any, inv: Any, req: Any, *env: Any) -> None:
            begin(self, inv, req, *env)
            assert self.record is not None and self.env is None
            self._full()

        monkeypatch.setattr(_common.Call, "_begin", begin_then_objects)
        # every call through _begin: a plain request's one pass (Call._read_plain) has no
        # objects to turn into (test_plain_requests.py compares it with _begin's records)
        monkeypatch.setattr(_common.Call, "_read_plain", lambda *args: False)
    tel = CapturedTelemetry(events_as=events_as)
    setup = Setup(tel, official, False)
    setup.start()
    try:
        with StubServer() as stub:
            shape(stub)
            shape(stub)
    finally:
        setup.stop()
        monkeypatch.undo()
    spans = [(s.name, s.status.status_code, s.status.description,
              [(k, None if k in _TIMES else v) for k, v in s.attributes.items()],
              [(e.name, dict(e.attributes)) for e in s.events]) for s in tel.spans()]
    metrics = {name: sorted((sorted(labels.items()), getattr(v, "sum", v))
                            for labels, v in points)
               for name, points in tel.metrics().items() if name.startswith("context.")}
    return {"spans": spans, "metrics": metrics, "bundles": untimed(tel.bundles()),
            "logs": [dict(r.log_record.attributes or {}) for r in tel.logs()]}


_TIMES = frozenset(("server.port", "gen_ai.response.time_to_first_chunk"))


@pytest.mark.parametrize("official", ["none", "outer", "inner"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_record_writes_what_the_envelope_objects_write(
        shape: str, official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    # context events as log records (``context.event_count`` closes the envelope) in one
    events_as = "logs" if official == "outer" else "span_events"
    record = _record(official, events_as, SHAPES[shape], False, monkeypatch)
    objects = _record(official, events_as, SHAPES[shape], True, monkeypatch)
    assert record == objects
    assert record["metrics"]["context.envelopes"]  # the call envelopes' points are there
    assert all(b["rebuild"]["status"] == "complete" for b in record["bundles"])
    closed = [dict(s[3]) for s in record["spans"] if S.CONTEXT_LIFECYCLE in dict(s[3])]
    assert len(closed) == 2 and all(
        (S.CONTEXT_EVENT_COUNT in attrs) == (events_as == "logs") for attrs in closed)

def _plain_call(monkeypatch: pytest.MonkeyPatch, strict: bool = False,
                tel: CapturedTelemetry | None = None, end: str = "one_pass"
                ) -> CapturedTelemetry:
    """One plain chat call; ``end="general"``: its end through ``Call.finish`` (the
    one-pass end, ``Call.finish_plain``, declining)."""
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    if end == "general":
        monkeypatch.setattr(_common.Call, "finish_plain", lambda self, fields: False)
    if tel is None:
        tel = CapturedTelemetry(strict=strict)
    setup = Setup(tel, "none", False)
    setup.start()
    try:
        with StubServer() as stub:
            _chat(stub)
    finally:
        setup.stop()
    return tel


def test_a_plain_calls_span_in_the_contracts_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call's records are written at its start, in the contract's order, with the
    envelope's own attributes first; its usage and closing attributes at its end."""
    tel = _plain_call(monkeypatch)
    (span,) = tel.spans()
    ours = [(k, v) for k, v in span.attributes.items() if k.startswith("context.")]
    # context.id and context.scope written again last (span limits drop the oldest first)
    assert [k for k, _ in ours] == [
        S.CONTEXT_SCHEMA_VERSION, S.CONTEXT_PRODUCER, S.BUDGET_ID, S.BUDGET_TARGET,
        S.BUDGET_MAX_TOKENS, S.BUDGET_RESERVED_TOKENS,
        S.BUDGET_OVERFLOW_STRATEGY, S.WINDOW_SEGMENT_NAMES, S.WINDOW_SEGMENT_ORDERS,
        S.WINDOW_SEGMENT_RESERVED_TOKENS, S.WINDOW_SEGMENT_USED_TOKENS, S.ASSEMBLY_ID,
        S.ASSEMBLY_TARGET, S.ASSEMBLY_BLOCK_COUNT, S.ASSEMBLY_TOKEN_COUNT,
        S.ASSEMBLY_BLOCK_ITEM_IDS, S.ASSEMBLY_BLOCK_KINDS, S.ASSEMBLY_BLOCK_TOKENS,
        S.ASSEMBLY_BLOCK_INJECTION_POINTS, S.ASSEMBLY_BLOCK_DIGESTS, S.INJECTION_ID,
        S.INJECTION_TARGET, S.INJECTION_POINT, S.BUDGET_ACTUAL_TOKENS,
        S.BUDGET_ACTUAL_ITEMS, S.BUDGET_UTILIZATION, S.BUDGET_OVERFLOW, S.CONTEXT_LIFECYCLE,
        S.CONTEXT_SCOPE, S.CONTEXT_SPAN_COUNT, S.CONTEXT_ID]
    attrs = dict(ours)
    assert (attrs[S.CONTEXT_ID], attrs[S.BUDGET_ID], attrs[S.ASSEMBLY_ID],
            attrs[S.INJECTION_ID]) == ("ctx_1", "bud_1", "asm_1", "inj_1")
    assert (attrs[S.CONTEXT_SCOPE], attrs[S.CONTEXT_LIFECYCLE],
            attrs[S.CONTEXT_SPAN_COUNT]) == ("turn", "injected", 0)
    assert attrs[S.BUDGET_ACTUAL_ITEMS] == attrs[S.ASSEMBLY_BLOCK_COUNT] == 4
    assert attrs[S.BUDGET_ACTUAL_TOKENS] == span.attributes[S.GEN_AI_USAGE_INPUT_TOKENS]
    (envelopes,) = tel.metrics()["context.envelopes"]
    assert envelopes == ({"scope": "turn", "agent": "unknown", "status": "complete"}, 1)
    (injected,) = tel.metrics()["context.injections"]  # the opening write's point
    assert injected[1] == 1


@pytest.mark.parametrize("prompt_tokens", [12.5, -3])
def test_an_odd_token_count_from_the_server_is_checked_as_a_budget_checks_it(
        prompt_tokens: float, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An OpenAI-compatible server answering a usage the contract cannot carry (a fraction,
    a negative count: the client passes both through): no ``actual_tokens``, no utilization
    point, a warning, as ``Budget.actual`` does; the application's call is untouched."""
    answer = _stub._Handler._json

    def odd_usage(self: Any, status: int, body: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
        if isinstance(body.get("usage"), dict):
            body = {**body, "usage": {**body["usage"], "prompt_tokens": prompt_tokens}}
        answer(self, status, body, headers)

    monkeypatch.setattr(_stub._Handler, "_json", odd_usage)
    tel = _plain_call(monkeypatch)
    (span,) = tel.spans()
    assert span.attributes.get(S.BUDGET_ACTUAL_TOKENS) is None
    assert span.attributes.get(S.BUDGET_UTILIZATION) is None
    assert span.attributes[S.CONTEXT_LIFECYCLE] == "injected"
    assert "context.budget.utilization" not in tel.metrics()
    assert any("Budget.actual" in r.getMessage() for r in caplog.records)


def test_a_failing_budget_metric_keeps_the_calls_closing_attributes(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The budget's points failing at the call's end loses those points only: the span's
    usage and closing attributes and the envelope's point stay (the bundle complete)."""
    record = _instruments._Instruments.__init__

    class Failing:
        def record(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("injected")

    def failing_utilization(self: Any, *args: Any, **kwargs: Any) -> None:
        record(self, *args, **kwargs)
        self.utilization = Failing()

    monkeypatch.setattr(_instruments._Instruments, "__init__", failing_utilization)
    tel = _plain_call(monkeypatch)
    (span,) = tel.spans()
    assert span.attributes[S.CONTEXT_LIFECYCLE] == "injected"
    assert span.attributes[S.BUDGET_ACTUAL_TOKENS] == span.attributes[
        S.GEN_AI_USAGE_INPUT_TOKENS]
    assert tel.metrics()["context.envelopes"]
    assert [b["rebuild"]["status"] for b in tel.bundles()] == ["complete"]
    assert any("budget metrics failed" in r.getMessage() for r in caplog.records)


def _failing_outcome_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The response's fields written on the invocation (``Call._record_outcome``, the
    one-pass ``Call.finish_plain``) raising."""

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(_common, "_put_response", failing)


_ENDS = pytest.mark.parametrize("end", ["one_pass", "general"])


@_ENDS
def test_a_failing_outcome_still_closes_the_calls_records(
        end: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Our error reading the response loses what it would have written, logged: the call's
    stages still stop (closing attributes, the envelope's point) and the span ends."""
    _failing_outcome_write(monkeypatch)
    tel = _plain_call(monkeypatch, end=end)
    (span,) = tel.spans()
    assert span.end_time is not None
    assert span.attributes[S.CONTEXT_LIFECYCLE] == "injected"
    assert S.BUDGET_ACTUAL_TOKENS not in span.attributes  # written after the failing write
    assert tel.metrics()["context.envelopes"]
    assert any("Call._record_outcome failed" in r.getMessage() for r in caplog.records)


def _failing_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call record's stop (``Call._end_stages``) raising."""

    def failing(self: Any, exc: BaseException | None, response: Any = None) -> None:
        raise RuntimeError("injected stop")

    monkeypatch.setattr(_folded.CallRecord, "stop", failing)


@_ENDS
def test_a_failing_stop_is_logged_and_the_span_still_ends(
        end: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Our error closing the call's records loses them, logged under the method's name
    from where it was caught; the application's call returns and its span ends."""
    _failing_stop(monkeypatch)
    tel = _plain_call(monkeypatch, end=end)
    (span,) = tel.spans()
    assert span.end_time is not None
    assert S.CONTEXT_LIFECYCLE not in span.attributes  # the stop's closing keys are lost
    (record,) = [r for r in caplog.records if "Call._end_stages failed" in r.getMessage()]
    # the catcher, not the log helper
    assert record.funcName == ("finish_plain" if end == "one_pass" else "finish")


@_ENDS
@pytest.mark.parametrize(("failing", "message"), [
    (_failing_outcome_write, "injected"), (_failing_stop, "injected stop")],
    ids=["outcome", "stop"])
def test_our_failure_at_the_calls_end_raises_in_strict_mode_after_the_span_ended(
        end: str, monkeypatch: pytest.MonkeyPatch,
        failing: Callable[[pytest.MonkeyPatch], None], message: str) -> None:
    """Strict (test) mode: our error surfaces, after the span ended."""
    failing(monkeypatch)
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    tel = CapturedTelemetry(strict=True)
    with pytest.raises(RuntimeError, match=message):
        _plain_call(monkeypatch, strict=True, tel=tel, end=end)
    (span,) = tel.spans()
    assert span.end_time is not None


@_ENDS
def test_a_failing_invocation_end_is_logged_as_the_calls_end(
        end: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Our error ending the invocation, after the records stopped, is the call's end
    failing (a warning with its traceback) on either end, not an unreadable response."""
    stop = _inference.LightInference.stop

    def failing(self: Any) -> None:
        stop(self)  # ended (its span and context restored), then the error
        raise RuntimeError("injected invocation stop")

    monkeypatch.setattr(_inference.LightInference, "stop", failing)
    _plain_call(monkeypatch, end=end)
    failed = [r for r in caplog.records if "_complete failed" in r.getMessage()]
    assert [r.levelname for r in failed] == ["WARNING"]
    assert failed[0].exc_info and "injected invocation stop" in str(failed[0].exc_info[1])
    assert not any("could not read the response" in r.getMessage() for r in caplog.records)


def test_a_failing_response_attribute_write_loses_the_usage_on_the_general_end(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The general end writes the response's own attributes by themselves: that write
    failing loses the usage after it, logged; the one-pass end writes them with the
    records' closing attributes (``CallRecord.stop``), so a failing write there is the
    stop's (``test_a_failing_stop_is_logged_and_the_span_still_ends``)."""

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(_common, "set_attributes", failing)
    tel = _plain_call(monkeypatch, end="general")
    (span,) = tel.spans()
    assert span.attributes[S.CONTEXT_LIFECYCLE] == "injected"
    assert S.BUDGET_ACTUAL_TOKENS not in span.attributes
    assert any("Call._record_outcome failed" in r.getMessage() for r in caplog.records)
