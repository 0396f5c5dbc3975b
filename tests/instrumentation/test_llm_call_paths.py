"""Every call path of the OpenAI client records the call: structured outputs (``parse``, for
chat and responses), ``with_raw_response`` and ``with_streaming_response``, sync and async;
and LangChain's ``with_structured_output``, which goes through
``chat.completions.with_raw_response.parse`` (a LangChain v1 agent with structured output
once recorded an empty envelope). The real clients against the local stub."""

from __future__ import annotations

import asyncio

import openai
import pytest
from llm_helpers import assert_folded, block_rows, inference_spans
from pydantic import BaseModel
from stub_server import StubServer

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


class Order(BaseModel):
    order_id: str
    eta_days: int


MESSAGES = [{"role": "system", "content": "You track orders."},
            {"role": "user", "content": "Where is order 42?"}]


@pytest.fixture
def tel():
    t = CapturedTelemetry()
    inst = OpenAIContextInstrumentor()
    inst.instrument(agent_context=t.agent_context, tracer_provider=t.tracer_provider)
    try:
        yield t
    finally:
        inst.uninstrument()
        t.shutdown()


def _recorded(tel: CapturedTelemetry) -> list[tuple[int, int]]:
    """(assembly blocks, input tokens the API reported) of each call's bundle."""
    out = []
    for bundle in tel.bundles():
        assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
        (assembly,) = bundle["context_assemblies"]
        (budget,) = bundle["context_budgets"]
        out.append((assembly["block_count"], budget["actual_tokens"]))
    return out


def test_parse_with_raw_and_streaming_responses_are_recorded(tel) -> None:
    with StubServer() as stub:
        client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="sk-test", max_retries=0)
        parsed = client.chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES,
                                               response_format=Order)
        assert parsed.choices[0].message.parsed.eta_days == 1
        raw = client.chat.completions.with_raw_response.parse(
            model="gpt-4o-mini", messages=MESSAGES, response_format=Order)
        assert raw.parse().choices[0].message.parsed.eta_days == 1
        with client.chat.completions.with_streaming_response.create(
                model="gpt-4o-mini", messages=MESSAGES) as streamed:
            assert streamed.parse().choices[0].message.content
        response = client.responses.parse(model="gpt-4o-mini", input="Where is order 42?",
                                          text_format=Order)
        assert response.output_parsed.eta_days == 1
        raw_response = client.responses.with_raw_response.create(model="gpt-4o-mini",
                                                                 input="Where is order 42?")
        assert raw_response.parse().output_text
    recorded = _recorded(tel)
    assert len(recorded) == 5
    assert [blocks for blocks, _ in recorded] == [2, 2, 2, 1, 1]
    assert all(tokens > 0 for _, tokens in recorded)  # each response was read too


def test_async_parse_is_recorded(tel) -> None:
    async def run(url: str) -> None:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        out = await client.chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES,
                                                  response_format=Order)
        assert out.choices[0].message.parsed.order_id
        out2 = await client.responses.parse(model="gpt-4o-mini", input="Where?",
                                            text_format=Order)
        assert out2.output_parsed.order_id

    with StubServer() as stub:
        asyncio.run(run(stub.url))
    assert len(_recorded(tel)) == 2


def test_langchain_structured_output_records_the_call(tel) -> None:
    from langchain_openai import ChatOpenAI

    with StubServer() as stub:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=f"{stub.url}/v1", api_key="sk-test",
                           max_retries=0)
        result = model.with_structured_output(Order).invoke("Where is order 42?")
    assert result.eta_days == 1
    spans = tel.spans()
    assert [s.name for s in spans if s.name.startswith("chat ")] == ["chat gpt-4o-mini"]
    call = assert_folded(spans)
    assert call.attributes[S.ASSEMBLY_BLOCK_COUNT] == 1
    assert len(block_rows(call)) == 1


def test_the_stub_matches_models_by_name_not_by_prefix() -> None:
    from otel_agent_context.instrumentation._stub import _window

    assert _window("gpt-4") == 8_192
    assert _window("gpt-4-0613") == 8_192  # a snapshot of gpt-4
    assert _window("gpt-4o-mini") == 128_000  # not gpt-4's window: a prefix is no match
    assert _window("gpt-4o-mini-2024-07-18") == 128_000
    assert _window("claude-3-haiku-20240307") == 200_000


@pytest.mark.parametrize(("argument", "api"), [
    ("max_tokens", "chat"), ("max_completion_tokens", "chat"),
    ("max_output_tokens", "responses")])
def test_the_reserved_output_is_read_from_each_limit_argument(tel, argument, api) -> None:
    # a mutation that stopped reading OpenAI's max_tokens once passed the whole suite
    with StubServer() as stub:
        client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="sk-test", max_retries=0)
        if api == "chat":
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES,
                                           **{argument: 321})
        else:
            client.responses.create(model="gpt-4o-mini", input="Where?", **{argument: 321})
    (bundle,) = tel.bundles()
    (budget,) = bundle["context_budgets"]
    assert budget["reserved_tokens"] == 321
    assert budget["max_tokens"] == 128_000
    output = [s for s in budget["window_segments"] if s["segment"] == "output"]
    assert output == [{"segment": "output", "order": output[0]["order"],
                       "reserved_tokens": 321}]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_context_length_error_states_the_limit_the_budget_keeps(provider) -> None:
    # our table believes 128,000 tokens; the API (the stub) says 8,192 / 200,000: the API
    # knows its model, so its limit is the budget's, and the overflow is measured against it
    import anthropic

    from otel_agent_context.instrumentation import register_model_window
    from otel_agent_context.instrumentation._models import _found, _user
    from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor

    model, stated = ("gpt-4", 8_192) if provider == "openai" else ("claude-3-haiku", 200_000)
    saved = dict(_user)
    register_model_window(model, 1_000_000 if provider == "anthropic" else 128_000)
    tel = CapturedTelemetry()
    inst = (OpenAIContextInstrumentor() if provider == "openai"
            else AnthropicContextInstrumentor())
    inst.instrument(agent_context=tel.agent_context, tracer_provider=tel.tracer_provider)
    long_text = "word " * (stated * 4 // 5 + 1000)
    try:
        with StubServer() as stub:
            if provider == "openai":
                client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="k", max_retries=0)
                with pytest.raises(openai.BadRequestError):
                    client.chat.completions.create(model=model, messages=[
                        {"role": "user", "content": long_text}])
            else:
                client = anthropic.Anthropic(base_url=stub.url, api_key="k", max_retries=0)
                with pytest.raises(anthropic.BadRequestError):
                    client.messages.create(model=model, max_tokens=10, messages=[
                        {"role": "user", "content": long_text}])
        (bundle,) = tel.bundles()
        (budget,) = bundle["context_budgets"]
        assert budget["max_tokens"] == stated
        assert budget["overflow"] is True and budget["overflow_tokens"] > 0
        assert budget["overflow_strategy"] == "reject"
    finally:
        inst.uninstrument()
        tel.shutdown()
        _user.clear()
        _user.update(saved)
        _found.clear()


def _block_ids(tel: CapturedTelemetry) -> list[str]:
    return [b[S.ITEM_ID] for s in inference_spans(tel.spans()) for b in block_rows(s)]


def test_a_repeated_message_is_a_block_of_its_own(tel) -> None:
    with StubServer() as stub:
        client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="sk-test", max_retries=0)
        client.chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "user", "content": "yes"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "yes"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "yes"}])
    ids = _block_ids(tel)
    assert len(ids) == len(set(ids)) == 5
    assert ids[2] == ids[0] + "#2" and ids[4] == ids[0] + "#3"
    (bundle,) = tel.bundles()
    assert len(bundle["context_items"]) == 5  # never two blocks' items under one id


def test_langchain_messages_keep_their_own_ids_in_the_assembly(tel) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages
    from langchain_openai import ChatOpenAI

    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    history = [SystemMessage("You track orders.", id="sys"),
               HumanMessage("Where is order 42?", id="h1"), AIMessage("It shipped.", id="a1"),
               HumanMessage("When will it arrive?", id="h2")]
    inst = LangChainContextInstrumentor()
    inst.instrument(agent_context=tel.agent_context)
    try:
        with StubServer() as stub:
            model = ChatOpenAI(model="gpt-4o-mini", base_url=f"{stub.url}/v1",
                               api_key="sk-test", max_retries=0)
            trimmer = trim_messages(max_tokens=3, token_counter=len, strategy="last",
                                    include_system=True)
            (trimmer | model).invoke(history)
    finally:
        inst.uninstrument()
    (bundle,) = tel.bundles()
    (assembly,) = bundle["context_assemblies"]
    truncated = [t["item_id"] for b in bundle["context_budgets"]
                 for t in b.get("truncation_records", ())]
    blocks = [b["item_id"] for b in assembly["ordered_blocks"]]
    assert blocks == ["sys", "a1", "h2"]  # the framework's ids, as in the truncation
    assert truncated == ["h1"]


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta_messages"])
def test_anthropic_parse_is_recorded(beta: bool) -> None:
    import anthropic

    from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor

    tel = CapturedTelemetry()
    inst = AnthropicContextInstrumentor()
    inst.instrument(agent_context=tel.agent_context, tracer_provider=tel.tracer_provider)
    try:
        with StubServer() as stub:
            client = anthropic.Anthropic(base_url=stub.url, api_key="k", max_retries=0)
            messages = client.beta.messages if beta else client.messages
            parsed = messages.parse(model="claude-sonnet-4-6", max_tokens=100,
                                    messages=[{"role": "user", "content": "Where is 42?"}],
                                    output_format=Order)
        assert parsed.parsed_output.eta_days == 1
        assert len(_recorded(tel)) == 1
    finally:
        inst.uninstrument()
        tel.shutdown()


def test_a_client_cached_before_uninstrument_records_nothing_after() -> None:
    """The SDKs cache ``with_raw_response`` / ``with_streaming_response`` on the client,
    holding the method as it was then (ours): after ``uninstrument()`` those calls go
    through unrecorded, as every other call does, and after ``instrument()`` again they
    are recorded once each, as a new client's are."""
    import anthropic

    from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor

    tel = CapturedTelemetry()
    instrumentors = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    for inst in instrumentors:
        inst.instrument(agent_context=tel.agent_context, tracer_provider=tel.tracer_provider)
    try:
        with StubServer() as stub:
            oc = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="sk-test", max_retries=0)
            ac = anthropic.Anthropic(base_url=stub.url, api_key="k", max_retries=0)
            anthropic_messages = [{"role": "user", "content": "Where is 42?"}]

            def calls() -> None:
                oc.chat.completions.with_raw_response.create(
                    model="gpt-4o-mini", messages=MESSAGES).parse()
                with oc.chat.completions.with_streaming_response.create(
                        model="gpt-4o-mini", messages=MESSAGES) as streamed:
                    streamed.parse()
                oc.responses.with_raw_response.create(model="gpt-4o-mini",
                                                      input="Where is 42?").parse()
                for messages in (ac.messages, ac.beta.messages):
                    messages.with_raw_response.create(
                        model="claude-sonnet-4-6", max_tokens=50,
                        messages=anthropic_messages).parse()

            calls()
            assert len(inference_spans(tel.spans())) == 5
            for inst in instrumentors:
                inst.uninstrument()
            calls()
            assert len(inference_spans(tel.spans())) == 5  # none more
            assert len(tel.bundles()) == 5
            for inst in instrumentors:
                inst.instrument(agent_context=tel.agent_context,
                                tracer_provider=tel.tracer_provider)
            calls()
            assert len(inference_spans(tel.spans())) == 10
            assert len(tel.bundles()) == 10
    finally:
        for inst in instrumentors:
            inst.uninstrument()
        tel.shutdown()
