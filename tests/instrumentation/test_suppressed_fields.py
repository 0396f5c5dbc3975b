"""Ours inside another util-genai inference (the official instrumentor outermost):
``LightSuppressed`` keeps only the fields a call sets and publishes them in one update of the
outer data; the response's provider attributes go on the outer span through ``_fastattrs``'
bulk check. What is published and recorded is what util-genai's own path and the SDK's
``set_attributes`` give (``test_light_inference.py`` compares whole calls)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler
from opentelemetry.util.genai.invocation import InferenceData

from otel_agent_context.instrumentation import _common, _inference
from otel_agent_context.instrumentation.openai import _extract as OX

WHERE = {"request_model": "gpt-x", "server_address": "h", "server_port": 1}


def _published(data: InferenceData) -> dict[str, Any]:
    return {f: getattr(data, f) for f in data.__dataclass_fields__}


def _suppressed(**fields: Any) -> tuple[Any, InferenceData]:
    data = InferenceData()
    inv = _inference.LightSuppressed(data, "openai", context=None, **WHERE)
    for name, value in fields.items():
        setattr(inv, name, value)
    return inv, data


def test_unset_fields_read_none_and_a_set_one_is_the_instances_own() -> None:
    first, _ = _suppressed(max_tokens=7, finish_reasons=["stop"])
    second, data = _suppressed()
    assert (first.max_tokens, first.finish_reasons) == (7, ["stop"])
    assert second.max_tokens is None and second.finish_reasons is None
    assert second.ttfc_seconds is None and second.conversation_id is None
    second.stop()
    assert data.request_max_tokens is None and data.response_finish_reasons is None


def test_the_span_is_the_one_get_current_span_gives() -> None:
    """The outer span read from the context by subscript: an SDK span as it is, anything
    else (no span, a non-recording one, a value that is not a span) as the API's
    ``get_current_span`` gives it."""
    from opentelemetry import trace

    sdk_span = TracerProvider().get_tracer("t").start_span("outer")
    others = [None, trace.NonRecordingSpan(sdk_span.get_span_context()), "not a span"]
    for value in [sdk_span, *others]:
        ctx = otel_context.Context() if value is None else \
            otel_context.set_value(trace.propagation._SPAN_KEY, value)
        inv = _inference.LightSuppressed(InferenceData(), "openai", context=ctx, **WHERE)
        assert inv.span is trace.get_current_span(ctx)
        token = otel_context.attach(ctx)  # context None: the current one
        try:
            inv = _inference.LightSuppressed(InferenceData(), "openai", context=None, **WHERE)
            assert inv.span is trace.get_current_span()
        finally:
            otel_context.detach(token)
    assert trace.get_current_span(otel_context.Context()) is trace.INVALID_SPAN


def test_published_like_setting_each_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one update stores what setting each field stores (the fields set, lists copied,
    a field set back to None not published, the start's where-fields)."""
    fields = {"max_tokens": 77, "stop_sequences": ("X",), "finish_reasons": ("stop",),
              "response_model_name": "m", "input_tokens": 9, "temperature": None,
              "conversation_compacted": True, "conversation_id": "conv-2"}
    published = []
    for plain in (True, False):
        monkeypatch.setattr(_inference, "_DATA_PLAIN", plain)
        inv, data = _suppressed(**fields)
        data.request_temperature = 0.5  # the outer one's: a None of ours leaves it
        inv.stop()
        inv.stop()  # once only
        published.append(_published(data))
    assert published[0] == published[1]
    got = published[0]
    assert got["request_max_tokens"] == 77 and got["request_temperature"] == 0.5
    assert got["request_stop_sequences"] == ["X"] and type(got["request_stop_sequences"]) is list
    assert got["response_finish_reasons"] == ["stop"]
    assert got["conversation_id"] == "conv-2" and got["conversation_compacted"] is True
    assert (got["provider_name"], got["operation_name"], got["request_model"],
            got["server_address"], got["server_port"]) == ("openai", "chat", "gpt-x", "h", 1)


def test_a_name_that_is_not_a_field_is_refused_and_nothing_published() -> None:
    inv, data = _suppressed(max_tokens=7)
    inv.max_token = 8  # a typo: util-genai's dataclass property would refuse it too
    before = _published(data)
    with pytest.raises(AttributeError, match="max_token"):
        inv.stop()
    assert _published(data) == before


def _composed_call(limits: SpanLimits | None, ended: bool, write: Any,
                   caplog: pytest.LogCaptureFixture) -> tuple[Any, ...]:
    """Ours inside another util-genai inference, an OpenAI chat call with a provider
    attribute in its response; the outer span ended first when ``ended``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tel = _common.ClientTelemetry("ours", tracer_provider=provider)
    other = TelemetryHandler(tracer_provider=provider, instrumentation_scope_name="theirs")
    api = _common.Api(OX.chat_request, OX.chat_response, OX.ChatAccumulator,
                      OX.chat_is_stream, OX.PROVIDER)
    result = ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
        "system_fingerprint": "fp_long_value", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})
    outer = other.inference("openai", operation_name="chat", **WHERE)
    assert otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY) is not None
    caplog.clear()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_common, "set_attributes", write)
        call = tel.start(api, (), {"model": "gpt-x", "messages": [
            {"role": "user", "content": "hello"}]}, "h", 1, True)
        assert isinstance(call.invocation, _inference.LightSuppressed)
        if ended:
            outer.span.end()
        _common._complete(call, api, result)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    outer.stop()
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes)
    for key in ("context.id", "context.budget.id", "context.assembly.id",
                "context.injection.id"):  # random ids: the same keys, not the same values
        if key in attrs:
            attrs[key] = "id"
    return list(attrs.items()), span.dropped_attributes, warnings


@pytest.mark.parametrize("ended", [False, True], ids=["live", "ended"])
@pytest.mark.parametrize("limits", [None, SpanLimits(max_span_attributes=12),
                                    SpanLimits(max_attribute_length=4)],
                         ids=["default", "count limit", "length limit"])
def test_provider_attributes_on_the_outer_span_as_the_sdk_writes_them(
        limits: SpanLimits | None, ended: bool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ours = _composed_call(limits, ended, _common.set_attributes, caplog)
    sdk = _composed_call(limits, ended, lambda span, attrs: span.set_attributes(attrs), caplog)
    assert ours == sdk
    attrs = dict(ours[0])
    if not ended and limits is None:
        assert attrs["openai.response.system_fingerprint"] == "fp_long_value"
    if not ended and limits is not None and limits.max_attribute_length == 4:
        assert attrs["openai.response.system_fingerprint"] == "fp_l"
