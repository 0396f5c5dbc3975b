"""A model call that util-genai merges into an outer inference which is not the current span.

The official LangChain GenAI instrumentor (``opentelemetry-instrumentation-genai-langchain``)
opens its chat invocation with ``_attach_to_context=False`` from a callback: the inference
context key is set around the model call, but the current span stays the caller's (our run
envelope's). Our OpenAI instrumentor's invocation is then a suppressed one whose ``span`` is
that current span. The folded records of two such calls used to land on the envelope span,
the second overwriting the first; put on the outer span instead they would sit in another
trace than the envelope (the framework instrumentor's), which an envelope does not cross.
Such a call now gets its own inference span, a child of the envelope. That instrumentor is
not installed by the test extras (its entry point would also join every
``opentelemetry-instrument`` run of the suite), so the test
opens the outer invocation the way it does, through util-genai's handler; everything else is
real: the ``openai`` client on the stub, our instrumentor, the SDK."""

from __future__ import annotations

import openai
from opentelemetry.context import attach, detach, get_value, set_value
from opentelemetry.trace import set_span_in_context
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler

from otel_agent_context import _semconv as S

MODEL = "gpt-4o-mini"


def _outer_call(handler: TelemetryHandler, env_span, client: openai.OpenAI, text: str) -> None:
    outer = handler.inference("openai", request_model=MODEL, _attach_to_context=False)
    # what the framework instrumentor's callback leaves current: its inference data under
    # the key, the caller's span as the current span
    data = get_value(CLIENT_INFERENCE_CONTEXT_KEY, context=outer._span_context)
    token = attach(set_value(CLIENT_INFERENCE_CONTEXT_KEY, data,
                             set_span_in_context(env_span)))
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}])
    finally:
        detach(token)
    outer.stop()


def test_calls_under_an_outer_inference_that_is_not_current_keep_their_records(alone,
                                                                            stub) -> None:
    tel = alone.tel
    handler = TelemetryHandler(tracer_provider=tel.tracer_provider)
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with tel.agent_context.envelope(scope="turn", agent_name="support") as env:
        _outer_call(handler, env.span, client, "Where is order 42?")
        _outer_call(handler, env.span, client, "And order 43?")
    spans = tel.spans()
    (envelope,) = [s for s in spans if S.CONTEXT_SCOPE in s.attributes]
    assert S.ASSEMBLY_ID not in envelope.attributes  # no call's records on the envelope
    ours = [s for s in spans if S.ASSEMBLY_ID in s.attributes]
    assert len(ours) == 2
    assert all(s.parent.span_id == envelope.context.span_id for s in ours)
    assert [s.attributes[S.ASSEMBLY_BLOCK_COUNT] for s in ours] == [1, 1]
    assert all(s.attributes[S.CONTEXT_ID] == env.context_id for s in ours)
    assert all(s.attributes[S.GEN_AI_USAGE_INPUT_TOKENS] > 0 for s in ours)
    assert envelope.attributes[S.CONTEXT_SPAN_COUNT] == 2
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
    assert len(bundle["context_assemblies"]) == 2
    assert all(b["actual_tokens"] > 0 for b in bundle["context_budgets"])


def test_an_outer_inference_that_is_current_still_merges_the_call(alone, stub) -> None:
    """The official OpenAI instrumentor's case: its inference is current, ours joins it."""
    tel = alone.tel
    handler = TelemetryHandler(tracer_provider=tel.tracer_provider)
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    with tel.agent_context.envelope(scope="turn", agent_name="support") as env:
        outer = handler.inference("openai", request_model=MODEL)  # attached: current
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        outer.stop()
    chats = [s for s in tel.spans() if s.name == f"chat {MODEL}"]
    assert len(chats) == 1  # one span for both
    assert chats[0].attributes[S.CONTEXT_ID] == env.context_id
    assert chats[0].attributes[S.ASSEMBLY_BLOCK_COUNT] == 1
