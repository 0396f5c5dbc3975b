"""The OpenAI instrumentor against the real ``openai`` client and the local stub."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import openai
import pydantic
import pytest
from llm_helpers import (
    assert_folded,
    assert_genai,
    assert_no_content,
    block_rows,
    blocks,
    events,
    inference_spans,
    named,
    one_inference,
    segments,
)
from opentelemetry.trace import StatusCode
from stub_server import REPLY, stub_tokens

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import estimate_tokens
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

MODEL = "gpt-4o-mini"
SYSTEM = "You are a support agent for ACME. Answer briefly."
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Where is my order 1234?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "orders_lookup", "arguments": '{"order": 1234}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'},
    {"role": "user", "content": "And when will it arrive?"},
]
EXPECTED_KINDS = [
    ("system_prompt", "system_prompt"), ("session_history", "message_history"),
    ("session_history", "message_history"), ("tool_result", "message_history"),
    ("user_message", "message_history"),
]


def client(stub) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)


def aclient(stub) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)


def check_chat_call(tel: CapturedTelemetry, *, streamed: bool = False) -> None:
    spans = tel.spans()
    inf = assert_folded(spans)
    assert len(spans) == 1, [s.name for s in spans]  # the inference span carries it all
    assert_genai(inf, "openai", MODEL)
    a = inf.attributes
    # the inference span IS the implicit envelope, and it holds the budget and assembly
    assert a[S.CONTEXT_SCOPE] == "turn"
    assert a[S.CONTEXT_LIFECYCLE] == "injected"
    assert a[S.CONTEXT_SPAN_COUNT] == 0
    assert a[S.CONTEXT_ID]
    assert a[S.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] > 0
    b = a
    assert b[S.BUDGET_MAX_TOKENS] == 128_000
    assert b[S.BUDGET_RESERVED_TOKENS] == 256
    assert b[S.BUDGET_OVERFLOW_STRATEGY] == "reject"
    assert b[S.BUDGET_ACTUAL_TOKENS] == a[S.GEN_AI_USAGE_INPUT_TOKENS]
    assert b[S.BUDGET_OVERFLOW] is False
    assert b[S.BUDGET_UTILIZATION] == pytest.approx(b[S.BUDGET_ACTUAL_TOKENS] / 128_000)
    segs = segments(inf)
    assert [s[S.WINDOW_SEGMENT] for s in segs] == [
        "system_prompt", "tool_definitions", "message_history", "output"]
    assert segs[0][S.WINDOW_USED_TOKENS] == estimate_tokens(SYSTEM)
    assert segs[-1][S.WINDOW_RESERVED_TOKENS] == 256
    assert [(k, p) for _, k, p in blocks(spans)] == EXPECTED_KINDS
    rows = block_rows(inf)
    assert rows[3][S.ITEM_ID] == "tool_result:call_1"
    assert rows[3][S.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert all(e[S.BLOCK_DIGEST].startswith("hmac-sha256:") for e in rows)
    assert a[S.ASSEMBLY_BLOCK_COUNT] == 5
    assert a[S.INJECTION_ID]
    assert a[S.INJECTION_POINT] == "message_history"
    assert S.ASSEMBLY_HASH not in a and S.INJECTION_HASH not in a  # derived
    (bundle,) = tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["context_envelope"]["scope"] == "turn"
    assert bundle["context_budgets"][0]["actual_tokens"] == a[S.GEN_AI_USAGE_INPUT_TOKENS]
    assert len(bundle["context_assemblies"][0]["ordered_blocks"]) == 5
    assert bundle["context_injections"][0]["assembly_id"] == a[S.ASSEMBLY_ID]
    assert bundle["context_injections"][0]["injection_id"] == a[S.INJECTION_ID]
    assert_no_content(spans)


TOOLS = [{"type": "function", "function": {"name": "orders_lookup", "parameters": {
    "type": "object", "properties": {"order": {"type": "integer"}}}}}]


def test_chat_sync(setup, stub) -> None:
    result = client(stub).chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=256, tools=TOOLS)
    assert result.choices[0].message.content == REPLY
    check_chat_call(setup.tel)


def test_a_model_that_is_not_a_string_keeps_the_calls_records(alone, stub) -> None:
    """``model=5`` is the application's mistake, the provider's to answer: our records of
    the call stay (the window unknown); before, the window lookup raised on it."""
    result = client(stub).chat.completions.create(model=5, messages=CONVERSATION)  # type: ignore[arg-type]
    assert result.choices[0].message.content == REPLY
    (span,) = alone.tel.spans()
    assert span.attributes[S.ASSEMBLY_BLOCK_COUNT] == len(CONVERSATION)
    assert S.BUDGET_MAX_TOKENS not in span.attributes
    (bundle,) = alone.tel.bundles()
    assert len(bundle["context_assemblies"][0]["ordered_blocks"]) == len(CONVERSATION)
    # the stub echoes the model: an int response model is the boundary's to repair
    assert [r["field"] for r in bundle["rebuild"].get("repairs", [])] == \
        ["gen_ai.response.model"]


def test_chat_sync_stage_spans(stage_spans, stub) -> None:
    """OTEL_AGENT_CONTEXT_STAGE_SPANS=true: the v0.1 form, a budget span with an event a
    window segment, an assembly span with an event a block, an injection event; the same
    facts as the folded form, and the same bundle."""
    client(stub).chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=256, tools=TOOLS)
    spans = stage_spans.tel.spans()
    inf = one_inference(spans)
    a = inf.attributes
    assert sorted(s.name for s in spans) == sorted([inf.name, S.SPAN_BUDGET, S.SPAN_ASSEMBLY])
    assert a[S.CONTEXT_SPAN_COUNT] == 2
    assert S.ASSEMBLY_BLOCK_ITEM_IDS not in a and S.BUDGET_ID not in a
    (budget,) = named(spans, S.SPAN_BUDGET)
    (asm,) = named(spans, S.SPAN_ASSEMBLY)
    for stage in (budget, asm):
        assert stage.parent.span_id == inf.context.span_id
        assert stage.attributes[S.CONTEXT_ID] == a[S.CONTEXT_ID]
    b = budget.attributes
    assert (b[S.BUDGET_MAX_TOKENS], b[S.BUDGET_RESERVED_TOKENS]) == (128_000, 256)
    assert b[S.BUDGET_ACTUAL_TOKENS] == a[S.GEN_AI_USAGE_INPUT_TOKENS]
    segs = events(budget, S.EVENT_WINDOW_SEGMENT)
    assert [s[S.WINDOW_SEGMENT] for s in segs] == [
        "system_prompt", "tool_definitions", "message_history", "output"]
    assert segs[-1][S.WINDOW_RESERVED_TOKENS] == 256
    rows = events(asm, S.EVENT_ASSEMBLY_BLOCK)
    assert [(e[S.ITEM_KIND], e[S.INJECTION_POINT]) for e in rows] == EXPECTED_KINDS
    assert rows[3][S.GEN_AI_TOOL_CALL_ID] == "call_1"
    (inj,) = events(inf, S.EVENT_INJECTION_APPLIED)
    assert inj[S.INJECTION_HASH] == asm.attributes[S.ASSEMBLY_HASH]
    (bundle,) = stage_spans.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert len(bundle["context_assemblies"][0]["ordered_blocks"]) == 5
    assert bundle["context_injections"][0]["assembly_id"] == asm.attributes[S.ASSEMBLY_ID]


def test_chat_stream(setup, stub) -> None:
    stream = client(stub).chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=256, tools=TOOLS,
        stream=True, stream_options={"include_usage": True})
    assert isinstance(stream, openai.Stream)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.strip() == REPLY
    check_chat_call(setup.tel, streamed=True)


def test_chat_stream_context_manager_closed_early(alone, stub) -> None:
    with client(stub).chat.completions.create(
            model=MODEL, messages=CONVERSATION, max_completion_tokens=256, stream=True,
            stream_options={"include_usage": True}) as stream:
        next(iter(stream))
    spans = alone.tel.spans()
    inf = one_inference(spans)
    assert inf.attributes[S.CONTEXT_LIFECYCLE] == "injected"
    assert inf.status.status_code != StatusCode.ERROR
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_chat_async_and_async_stream(setup, stub) -> None:
    async def run() -> str:
        c = aclient(stub)
        await c.chat.completions.create(model=MODEL, messages=CONVERSATION,
                                        max_completion_tokens=256, tools=TOOLS)
        stream = await c.chat.completions.create(
            model=MODEL, messages=CONVERSATION, max_completion_tokens=256, tools=TOOLS,
            stream=True, stream_options={"include_usage": True})
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(run()).strip() == REPLY
    spans = setup.tel.spans()
    assert len(inference_spans(spans)) == 2
    assert len(setup.tel.bundles()) == 2
    for bundle in setup.tel.bundles():
        assert bundle["rebuild"]["status"] == "complete"
        assert bundle["context_budgets"][0]["actual_tokens"] > 0


def test_chat_stream_helper(setup, stub) -> None:
    with client(stub).chat.completions.stream(
            model=MODEL, messages=CONVERSATION, max_completion_tokens=256,
            stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content.strip() == REPLY
    inf = one_inference(setup.tel.spans())
    assert inf.attributes[S.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert setup.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_responses_items_refs_and_compaction_input(setup, stub) -> None:
    c = client(stub)
    first = c.responses.create(model=MODEL, input="Where is my order?",
                               instructions="Be brief.", max_output_tokens=128)
    setup.tel.clear()
    c.responses.create(
        model=MODEL, instructions="Be brief.", previous_response_id=first.id,
        max_output_tokens=128,
        input=[{"type": "compaction", "id": "cmp_old", "encrypted_content": "gAAAA-old"},
               {"type": "function_call", "call_id": "call_9", "name": "orders_lookup",
                "arguments": "{}"},
               {"type": "function_call_output", "call_id": "call_9", "output": "shipped"},
               {"role": "user", "content": "When?"}])
    spans = setup.tel.spans()
    inf = one_inference(spans)
    assert_genai(inf, "openai", MODEL)
    assert inf.attributes[S.GEN_AI_CONVERSATION_COMPACTED] is True
    assert inf.attributes["gen_ai.request.previous_response.id"] == first.id
    assert blocks(spans) == [
        ("instructions:" + blocks(spans)[0][0].split(":")[1], "system_prompt", "system_prompt"),
        (f"response:{first.id}", "session_history", "message_history"),
        ("compaction:cmp_old", "computed_summary", "message_history"),
        ("tool_call:call_9", "session_history", "message_history"),
        ("tool_result:call_9", "tool_result", "message_history"),
        (blocks(spans)[5][0], "user_message", "message_history"),
    ]
    ref = block_rows(inf)[1]
    assert ref[S.ITEM_CONTENT_MODE] == "ref"
    assert ref[S.GEN_AI_RESPONSE_ID] == first.id
    (bundle,) = setup.tel.bundles()
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items[f"response:{first.id}"]["source_refs"][0]["external_mappings"] == {
        "model_api.response_id": first.id}
    assert items["compaction:cmp_old"]["content_mode"] == "opaque"


@pytest.mark.parametrize("conversation", ["conv_77", {"id": "conv_77"}], ids=["id", "object"])
def test_responses_a_stored_conversation_and_prompt_are_ref_blocks(setup, stub,
                                                                  conversation) -> None:
    """What the API adds from its own store (a conversation's items, a prompt template) is
    not in the request: a block naming each, where the API puts it (the prompt with the
    instructions, the conversation's items before the input); the conversation is the
    call's ``gen_ai.conversation.id``, as the official instrumentor records it."""
    prompt = {"id": "pmpt_9", "variables": {"name": "Grace Hopper"}}
    client(stub).responses.create(model=MODEL, instructions="Be brief.", prompt=prompt,
                                  conversation=conversation, input="And tomorrow?",
                                  max_output_tokens=64)
    ((_, body),) = stub.requests
    assert body["conversation"] == conversation and body["prompt"] == prompt  # as given
    spans = setup.tel.spans()
    inf = one_inference(spans)
    assert inf.attributes[S.GEN_AI_CONVERSATION_ID] == "conv_77"
    found = blocks(spans)
    assert found[0] == ("prompt:pmpt_9", "system_prompt", "system_prompt")
    assert found[1][0].startswith("instructions:")
    assert found[2] == ("conversation:conv_77", "session_history", "message_history")
    assert found[3][1] == "user_message" and len(found) == 4
    rows = block_rows(inf)
    assert [r.get(S.ITEM_CONTENT_MODE) for r in rows] == ["ref", None, "ref", None]
    (bundle,) = setup.tel.bundles()
    assert bundle["context_envelope"]["metadata"][S.GEN_AI_CONVERSATION_ID] == "conv_77"
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["prompt:pmpt_9"]["content_ref"] == "openai:prompts/pmpt_9"
    assert items["conversation:conv_77"]["content_ref"] == "openai:conversations/conv_77"
    assert "Grace Hopper" not in json.dumps(bundle)


@pytest.mark.parametrize("named", [None, "app_conv"], ids=["unnamed", "named"])
def test_an_envelope_belongs_to_the_conversation_its_calls_name(setup, stub, named) -> None:
    """An application's envelope that names no conversation takes the first one a call
    inside it names (the request's stored conversation, or util-genai's ambient one), so the
    store groups its turns; an envelope's own id stands, the calls keep theirs."""
    from opentelemetry import context as otel_context
    from opentelemetry.util.genai._conversation_context import with_conversation_id

    c = client(stub)
    with setup.tel.agent_context.envelope(agent_name="support", conversation_id=named):
        c.responses.create(model=MODEL, input="Hi", conversation="conv_77",
                           max_output_tokens=64)
        c.responses.create(model=MODEL, input="Hi", conversation="conv_88",
                           max_output_tokens=64)
    token = otel_context.attach(with_conversation_id("amb_1"))
    try:
        with setup.tel.agent_context.envelope(agent_name="support", conversation_id=named):
            for _ in range(2):  # the second call of a conversation takes the one-pass reader
                c.chat.completions.create(model=MODEL, messages=CONVERSATION,
                                          max_completion_tokens=64)
    finally:
        otel_context.detach(token)
    calls = [s.attributes.get(S.GEN_AI_CONVERSATION_ID) for s in setup.tel.spans()
             if s.kind.name == "CLIENT"]
    assert calls == ["conv_77", "conv_88", "amb_1", "amb_1"]
    metadata = [b["context_envelope"]["metadata"].get(S.GEN_AI_CONVERSATION_ID)
                for b in setup.tel.bundles()]
    assert metadata == ([named, named] if named else ["conv_77", "amb_1"])


@pytest.mark.parametrize("shots", [("a", "b", "c"), ("a", "a", "b")], ids=["three", "repeat"])
def test_responses_computer_screenshots_are_their_calls_results(alone, stub, shots) -> None:
    """A computer-use agent's screenshots (``computer_call_output``): each its call's
    result, named by the call and by what the image carries (its data never written)."""
    def shot(tag: str) -> str:
        return "data:image/png;base64," + base64.b64encode(tag.encode() * 500).decode()

    items: list[dict[str, Any]] = [{"role": "user", "content": "Book a flight."}]
    for i, tag in enumerate(shots):
        items += [{"type": "computer_call", "id": f"cu_{i}", "call_id": f"call_{i}",
                   "action": {"type": "screenshot"}, "pending_safety_checks": [],
                   "status": "completed"},
                  {"type": "computer_call_output", "call_id": f"call_{i}",
                   "output": {"type": "computer_screenshot", "image_url": shot(tag)}}]
    client(stub).responses.create(model=MODEL, input=items, truncation="auto",
                                  max_output_tokens=64)
    rows = [r for r in block_rows(one_inference(alone.tel.spans()))
            if r[S.ITEM_ID].startswith("tool_result:")]
    assert [r[S.ITEM_ID] for r in rows] == ["tool_result:call_0", "tool_result:call_1",
                                           "tool_result:call_2"]
    assert [r[S.GEN_AI_TOOL_CALL_ID] for r in rows] == ["call_0", "call_1", "call_2"]
    digests = [r[S.BLOCK_DIGEST] for r in rows]
    assert len(set(digests)) == len(set(shots))  # the same screenshot, the same digest
    recorded = str([dict(s.attributes) for s in alone.tel.spans()]) + str(alone.tel.bundles())
    assert base64.b64encode(b"a" * 60).decode()[:40] not in recorded
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_a_callers_span_keeps_the_conversation_it_names(setup, stub) -> None:
    """An envelope on the caller's span (``span=``) that names its conversation as an
    attribute, not an argument: the span's id stands."""
    tracer = setup.tel.tracer_provider.get_tracer("app")
    for early in (True, False):  # named before the envelope, or after it, before the call
        with tracer.start_as_current_span("invoke_agent support") as span:
            if early:
                span.set_attribute(S.GEN_AI_CONVERSATION_ID, "app-conv-1")
            with setup.tel.agent_context.envelope(span=span):
                if not early:
                    span.set_attribute(S.GEN_AI_CONVERSATION_ID, "app-conv-1")
                client(stub).responses.create(model=MODEL, input="Hi", conversation="conv_77",
                                              max_output_tokens=64)
    agents = [s for s in setup.tel.spans() if s.name == "invoke_agent support"]
    assert [a.attributes[S.GEN_AI_CONVERSATION_ID] for a in agents] == ["app-conv-1"] * 2
    metadata = [b["context_envelope"]["metadata"][S.GEN_AI_CONVERSATION_ID]
                for b in setup.tel.bundles()]
    assert metadata == ["app-conv-1"] * 2


def test_an_envelope_inside_another_is_part_of_its_conversation(setup, stub) -> None:
    """An envelope opened inside another (a sub-agent's turn, a task) that names no
    conversation is part of the outer one's, whether the outer named it or took it from a
    call; one that names its own, or whose caller's span does, keeps it."""
    ctx = setup.tel.agent_context
    tracer = setup.tel.tracer_provider.get_tracer("app")
    c = client(stub)

    def ask(conversation: str | None = None) -> None:
        extra = {"conversation": conversation} if conversation else {}
        c.responses.create(model=MODEL, input="Hi", max_output_tokens=64, **extra)

    with ctx.envelope(agent_name="desk", conversation_id="conv_outer"):
        with ctx.envelope(agent_name="named by the outer"):
            ask()
        with ctx.envelope(agent_name="its own", conversation_id="conv_own"):
            ask()
        with tracer.start_as_current_span("invoke_agent sub") as span:
            span.set_attribute(S.GEN_AI_CONVERSATION_ID, "conv_span")
            with ctx.envelope(agent_name="its span's", span=span):
                ask()
        with tracer.start_as_current_span("invoke_agent later") as span, \
                ctx.envelope(agent_name="the outer's, then its span's own", span=span):
            span.set_attribute(S.GEN_AI_CONVERSATION_ID, "conv_later")  # after it opened
            with ctx.envelope(agent_name="inside the span's"):
                ask()
    with ctx.envelope(agent_name="adopted"):
        ask("conv_called")  # the outer takes its call's conversation
        with ctx.envelope(agent_name="after the call"):
            ask()
    named = {b["context_envelope"]["metadata"][S.GEN_AI_AGENT_NAME]:
             b["context_envelope"]["metadata"].get(S.GEN_AI_CONVERSATION_ID)
             for b in setup.tel.bundles()}
    assert named == {"desk": "conv_outer", "named by the outer": "conv_outer",
                     "its own": "conv_own", "its span's": "conv_span",
                     "the outer's, then its span's own": "conv_later",
                     "inside the span's": "conv_later",
                     "adopted": "conv_called", "after the call": "conv_called"}


@pytest.mark.parametrize("odd", [
    {"conversation": ""}, {"conversation": {"id": ""}}, {"conversation": {"name": "x"}},
    {"conversation": 7}, {"prompt": {"version": "2"}}, {"prompt": {"id": 7}}, {"prompt": "pmpt"},
    {"prompt": None, "conversation": None}], ids=repr)
def test_responses_an_odd_conversation_or_prompt_names_nothing(alone, stub, odd) -> None:
    """A conversation or prompt that names no stored one: no block, no conversation id, the
    call recorded as without it (the API answers what it makes of the request)."""
    client(stub).responses.create(model=MODEL, input="Hi", max_output_tokens=64, **odd)
    spans = alone.tel.spans()
    inf = one_inference(spans)
    assert S.GEN_AI_CONVERSATION_ID not in inf.attributes
    assert [b[1] for b in blocks(spans)] == ["user_message"]
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


class _PromptOfAComputedVersion(pydantic.BaseModel):
    """A prompt the SDK serialises from its fields alone; reading ``version`` fails."""

    id: str

    @property
    def version(self) -> str:
        raise ValueError("computed elsewhere")


@pytest.mark.parametrize(("prompt", "block"), [
    ({"id": "pmpt_2", "version": 4}, "prompt:pmpt_2@4"),
    (_PromptOfAComputedVersion(id="pmpt_1"), "prompt:pmpt_1"),
], ids=["numbered_version", "failing_property"])
def test_responses_a_prompt_read_as_far_as_it_reads(alone, stub, prompt, block) -> None:
    """A version given as a number is the version; an application object whose property
    fails when read is read without it, the call's other records kept."""
    client(stub).responses.create(model=MODEL, input="Hi", max_output_tokens=64, prompt=prompt)
    spans = alone.tel.spans()
    assert [b[0] for b in blocks(spans)][:1] == [block]
    assert [b[1] for b in blocks(spans)][1:] == ["user_message"]
    assert alone.tel.bundles()[0]["rebuild"]["status"] == "complete"


def test_images_and_files_are_named_by_what_they_carry(setup, stub) -> None:
    """A message's image, audio or file parts are named by a keyed digest of their URL,
    data or file id (never written): two images are two messages, the same one again is
    the same message; chat and Responses alike."""
    c = client(stub)
    urls = ("https://cdn.example/a.png?sig=1", "https://cdn.example/b.png?sig=2",
            "https://cdn.example/a.png?sig=1")
    for url in urls:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": url}}]}])
    for file_id in ("file-AAA111", "file-BBB222"):
        c.responses.create(model=MODEL, max_output_tokens=64, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Summarise the attachment."},
            {"type": "input_file", "file_id": file_id},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo"}]}])
    calls = [block_rows(s) for s in inference_spans(setup.tel.spans())]
    ids = [[r[S.ITEM_ID] for r in rows] for rows in calls]
    assert len(ids) == 5 and all(len(i) == 1 for i in ids)
    assert ids[0] != ids[1] and ids[2] == ids[0]
    assert ids[3] != ids[4]
    assert calls[0][0][S.BLOCK_DIGEST] != calls[1][0][S.BLOCK_DIGEST]
    recorded = str([dict(s.attributes) for s in setup.tel.spans()]) + str(setup.tel.bundles())
    for private in ("cdn.example", "sig=", "file-AAA111", "iVBORw0KGgo"):
        assert private not in recorded


def test_responses_truncation_auto(alone, stub) -> None:
    history = [{"role": "user" if i % 2 else "assistant", "content": "x" * 4000}
               for i in range(12)]
    result = client(stub).responses.create(model="gpt-4", input=history, truncation="auto",
                                           max_output_tokens=500)
    spans = alone.tel.spans()
    budget = assert_folded(spans)  # the inference span carries the budget and its cut
    b = budget.attributes
    assert b[S.BUDGET_MAX_TOKENS] == 8_192
    assert b[S.BUDGET_OVERFLOW_STRATEGY] == "truncate_middle"
    assert b[S.BUDGET_ACTUAL_TOKENS] == result.usage.input_tokens
    (cut,) = events(budget, S.EVENT_BUDGET_TRUNCATED)
    assert cut[S.WINDOW_SEGMENT] == "message_history"
    assert cut[S.TRUNCATION_STRATEGY] == "truncate_middle"
    assert cut[S.TRUNCATION_TOKENS_BEFORE] == 12 * estimate_tokens("x" * 4000)
    assert cut[S.TRUNCATION_TOKENS_AFTER] == result.usage.input_tokens
    # the input before the cut did not fit: an overflow, as trim_messages records one
    assert b[S.BUDGET_OVERFLOW] is True
    assert b[S.BUDGET_OVERFLOW_TOKENS] == 12 * estimate_tokens("x" * 4000) + 500 - 8_192
    metrics = alone.tel.metrics()
    assert metrics[S.METRIC_TRUNCATIONS][0][1] == 1


def test_responses_provider_compaction(alone, stub) -> None:
    result = client(stub).responses.create(
        model=MODEL, input=[{"role": "user", "content": "y" * 2000} for _ in range(4)],
        context_management=[{"type": "compaction", "compact_threshold": 1000}])
    assert result.output[0].type == "compaction"
    spans = alone.tel.spans()
    (cmp,) = named(spans, S.SPAN_COMPACTION)
    c = cmp.attributes
    assert c[S.COMPACTION_METHOD] == "provider_context_editing"
    assert c[S.COMPACTION_TRIGGER] == "compact_threshold"
    assert c[S.COMPACTION_SOURCE_COUNT] == 4
    assert c[S.COMPACTION_TOKENS_AFTER] == result.usage.input_tokens
    assert c[S.SUMMARY_ID] == f"compaction:{result.output[0].id}"
    inf = one_inference(spans)
    assert_folded(spans)
    assert inf.attributes[S.CONTEXT_SPAN_COUNT] == 1  # the compaction span
    (bundle,) = alone.tel.bundles()
    assert bundle["rebuild"]["status"] == "complete"
    assert bundle["context_compactions"][0]["loss_notes"]


def test_responses_stream_and_helper(setup, stub) -> None:
    c = client(stub)
    events_seen = [e.type for e in c.responses.create(model=MODEL, input="hi", stream=True)]
    assert events_seen[-1] == "response.completed"
    with c.responses.stream(model=MODEL, input="hi again") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                break  # leave early: closing the stream must still finish the call
    spans = setup.tel.spans()
    infs = inference_spans(spans)
    assert len(infs) == 2
    assert infs[0].attributes[S.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert all(s.attributes[S.CONTEXT_LIFECYCLE] == "injected" for s in infs)
    assert [b["rebuild"]["status"] for b in setup.tel.bundles()] == ["complete", "complete"]


def test_explicit_envelope(alone, stub) -> None:
    tel = alone.tel
    with tel.agent_context.envelope(scope="task", agent_name="support") as env:
        client(stub).chat.completions.create(model=MODEL, messages=CONVERSATION)
    spans = tel.spans()
    inf = one_inference(spans)
    (envelope,) = named(spans, S.SPAN_ENVELOPE)
    assert S.CONTEXT_SCOPE not in inf.attributes
    assert inf.attributes[S.CONTEXT_ID] == env.context_id
    assert envelope.attributes[S.CONTEXT_SPAN_COUNT] == 1  # the inference span joined it
    assert inf.parent.span_id == envelope.context.span_id
    assert_folded(spans)
    assert inf.attributes[S.BUDGET_MAX_TOKENS] == 128_000
    assert S.INJECTION_HASH not in inf.attributes  # derived by the rebuild
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["scope"] == "task"
    assert bundle["rebuild"]["status"] == "complete"


def test_content_capture(capture_setup, stub) -> None:
    client(stub).chat.completions.create(model=MODEL, messages=CONVERSATION)
    spans = capture_setup.tel.spans()
    inf = assert_folded(spans)
    first = block_rows(inf)[0]
    assert first[S.BLOCK_DIGEST].startswith("hmac-sha256:")
    if capture_setup.capture:
        assert first[S.ITEM_CONTENT] == SYSTEM
        assert json.loads(inf.attributes[S.GEN_AI_SYSTEM_INSTRUCTIONS])[0]["content"] == SYSTEM
        assert REPLY in inf.attributes[S.GEN_AI_OUTPUT_MESSAGES]
        items = capture_setup.tel.bundles()[0]["context_items"]
        assert items[0]["content"] == SYSTEM
    else:
        assert_no_content(spans)
        assert "content" not in capture_setup.tel.bundles()[0]["context_items"][0]


def _too_long(c: openai.OpenAI) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model="gpt-4",
                                  messages=[{"role": "user", "content": "x" * 40_000}])
    return info.value


def test_context_length_error_is_a_rejected_overflow(stub) -> None:
    plain = _too_long(client(stub))  # uninstrumented
    tel = CapturedTelemetry()
    inst = OpenAIContextInstrumentor()
    inst.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider,
                    agent_context=tel.agent_context)
    try:
        seen = _too_long(client(stub))
    finally:
        inst.uninstrument()
        tel.shutdown()
    assert type(seen) is type(plain)
    assert str(seen) == str(plain)
    assert seen.code == plain.code == "context_length_exceeded"
    assert seen.body == plain.body
    spans = tel.spans()
    inf = assert_folded(spans)
    assert inf.status.status_code == StatusCode.ERROR
    assert inf.attributes[S.ERROR_TYPE]
    b = inf.attributes
    assert b[S.BUDGET_OVERFLOW] is True
    assert b[S.BUDGET_OVERFLOW_STRATEGY] == "reject"
    prompt = stub_tokens("x" * 40_000) + 4 + 3
    assert b[S.BUDGET_OVERFLOW_TOKENS] == prompt - 8_192
    (bundle,) = tel.bundles()
    assert bundle["context_budgets"][0]["overflow"] is True
    assert bundle["rebuild"]["status"] == "complete"
    overflows = tel.metrics()[S.METRIC_BUDGET_OVERFLOWS]
    assert overflows == [({"target": "model", "agent": "unknown",
                           "overflow_strategy": "reject"}, 1)]


def _responses_ends(c: openai.OpenAI) -> list[str]:
    """Responses calls that end without a response, each in its own way; their names."""
    too_long = "x" * 40_000
    with pytest.raises(openai.BadRequestError):  # refused, a plain request (one pass)
        c.responses.create(model="gpt-4", input=too_long)
    with pytest.raises(openai.BadRequestError):  # refused, read by the general reader
        c.responses.create(model="gpt-4", input=too_long, temperature=0.2)
    with pytest.raises(openai.BadRequestError):  # refused, streaming
        c.responses.create(model="gpt-4", input=too_long, stream=True)
    stream = c.responses.create(model="gpt-4o-mini", input="hi", stream=True)
    next(iter(stream))
    stream.close()  # the application stops reading: the stream is cut short
    with pytest.raises(KeyError), c.responses.create(model="gpt-4o-mini", input="hi",
                                                     stream=True) as stream:
        for _ in stream:
            raise KeyError("the application's own error mid-stream")
    return ["refused", "refused_general", "refused_stream", "closed", "broken"]


@pytest.mark.parametrize("with_official", [False, True])
def test_a_responses_call_without_a_response_still_records_the_api_type(
        stub, with_official: bool) -> None:
    """``openai.api.type`` names the API called, so every Responses call has it, with ours
    alone as with the GenAI instrumentor (which writes it at the request): a refused call,
    a stream closed early, a stream the application's error breaks (ours alone used to
    write it from the response only)."""
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    tel = CapturedTelemetry()
    settings = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    ours = OpenAIContextInstrumentor()
    official = OpenAIInstrumentor() if with_official else None
    ours.instrument(**settings, agent_context=tel.agent_context)
    if official is not None:
        official.instrument(**settings)
    try:
        names = _responses_ends(client(stub))
    finally:
        if official is not None:
            official.uninstrument()
        ours.uninstrument()
        tel.shutdown()
    spans = [s for s in tel.spans() if S.ASSEMBLY_BLOCK_ITEM_IDS in (s.attributes or {})]
    assert len(spans) == len(names)
    for name, span in zip(names, spans, strict=True):
        assert span.attributes.get("openai.api.type") == "responses", name
        assert (span.status.status_code is StatusCode.ERROR) == name.startswith(
            ("refused", "broken")), name


def _helper_calls(stub: Any, api: str, asynchronous: bool, ways: list[str]) -> None:
    """One call a way through the SDK's ``stream()`` helper of ``api``, its block left as
    the way says: drained, left early (``break``), or by the application's error
    mid-stream (which must reach the application unchanged)."""
    kwargs: dict[str, Any] = (
        {"model": "gpt-4o-mini", "input": "hi"} if api == "responses" else
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})

    def manager(c: Any) -> Any:
        return (c.responses.stream(**kwargs) if api == "responses"
                else c.chat.completions.stream(**kwargs))

    def read(how: str) -> None:
        with manager(client(stub)) as stream:
            for _ in stream:
                if how == "broken":
                    raise KeyError("the application's own error")
                if how == "left":
                    break

    async def read_async(ac: openai.AsyncOpenAI, how: str) -> None:
        async with manager(ac) as stream:
            async for _ in stream:
                if how == "broken":
                    raise KeyError("the application's own error")
                if how == "left":
                    break

    async def all_async() -> None:
        ac = aclient(stub)
        for how in ways:
            if how == "broken":
                with pytest.raises(KeyError, match="the application's own error"):
                    await read_async(ac, how)
            else:
                await read_async(ac, how)
        await ac.close()

    if asynchronous:
        asyncio.run(all_async())
        return
    for how in ways:
        if how == "broken":
            with pytest.raises(KeyError, match="the application's own error"):
                read(how)
        else:
            read(how)


@pytest.mark.parametrize(("api", "official"), [
    ("responses", "none"), ("responses", "outer"), ("responses", "inner"),
    # not ("chat", "outer"): the GenAI instrumentor's own span of a chat helper's stream
    # left early is an error (``_OTHER``), alone as outermost (benchmarks, run AK)
    ("chat", "none"), ("chat", "inner")])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_error_leaving_a_stream_helpers_block_fails_the_call(
        stub, api: str, asynchronous: bool, official: str) -> None:
    """The ``stream()`` helpers' managers close the stream's HTTP response on exit, error or
    not: the application's error leaving the block fails the call (it was recorded as a
    stream closed early: no error status, with ours alone), and reaches the application
    unchanged; a drained or a left stream is no error."""
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    tel = CapturedTelemetry()
    settings = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    ours, theirs = OpenAIContextInstrumentor(), OpenAIInstrumentor()
    order = {"none": [ours], "outer": [ours, theirs], "inner": [theirs, ours]}[official]
    for inst in order:  # the last instrumented is the outermost wrapper
        inst.instrument(**settings, **({"agent_context": tel.agent_context}
                                       if inst is ours else {}))
    ways = ["drained", "left", "broken"]
    try:
        _helper_calls(stub, api, asynchronous, ways)
    finally:
        for inst in reversed(order):
            inst.uninstrument()
        tel.shutdown()
    spans = [s for s in tel.spans() if S.ASSEMBLY_BLOCK_ITEM_IDS in (s.attributes or {})]
    assert len(spans) == len(ways)
    for how, span in zip(ways, spans, strict=True):
        failed = span.status.status_code is StatusCode.ERROR
        assert failed == (how == "broken"), (how, span.status)
        if failed and official != "outer":  # ours ends it (the official's own type: _OTHER)
            assert span.attributes[S.ERROR_TYPE] == "KeyError"
